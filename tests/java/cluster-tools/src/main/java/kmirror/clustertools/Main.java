package kmirror.clustertools;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeTopicsOptions;
import org.apache.kafka.clients.admin.ElectLeadersOptions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.common.ElectionType;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.errors.TopicExistsException;
import org.apache.kafka.common.protocol.Errors;

/**
 * The Admin side of the cluster test harness (tests/cluster/cluster.sh, docs/testing-cluster.md).
 * Works against any Kafka-protocol cluster (Apache Kafka, kbroker).
 *
 * <pre>
 * create-topic --bootstrap B --topic T --partitions P --rf R [--config k=v]...
 *              [--assign 1:2:3,2:3:1,...] [--timeout-ms T] [--once true]
 * describe     --bootstrap B [--topic T]... [--timeout-ms T]
 * leader       --bootstrap B --topic T --partition P [--timeout-ms T]
 * wait         --bootstrap B --topic T [--partition P|all] --until COND [--hold-ms H]
 *              [--timeout-ms T]
 * elect        --bootstrap B --type preferred|unclean [--partition T:P]... [--timeout-ms T]
 * </pre>
 *
 * describe prints stable text, one fact per line, sorted:
 * <pre>
 * cluster id=ID controller=N brokers=1,2,3
 * topic T id=UUID partitions=P
 * partition T P leader=N|none replicas=a,b,c isr=a,b elr=c last_known_elr=
 * </pre>
 * create-topic --once true makes one attempt bounded by --timeout-ms and reports how it ended:
 * "create-topic: ok", "create-topic: exists" (exit 0 both) or
 * "create-topic: FAILED class=C retriable=true|false message=M" (exit 1), for
 * checks that a metadata change fails cleanly while the controller is down.
 *
 * leader prints the leader's node id, or "none" (exit 0 either way; 2 when the topic cannot be
 * described before the deadline).
 *
 * wait polls describeTopics (every 100 ms) until COND holds for every selected partition, then,
 * with --hold-ms, requires it to keep holding for that long (a partition that must stay
 * offline). Conditions: leader=N, leader!=N, no-leader, has-leader, isr-size=K, isr-full
 * (ISR equals the replica set), isr-has=N, isr-without=N. Several conditions joined with "+"
 * must all hold. Prints the partition lines at the end. Exit 0 met, 1 not met before the
 * deadline (or broken during --hold-ms), 2 error, 64 usage.
 *
 * elect is Admin.electLeaders for the named partitions (none named: null, every partition) and
 * prints one sorted line per partition the answer names: "elect T P ok" or
 * "elect T P error=NAME" (NAME as in Kafka's Errors, e.g. ELECTION_NOT_NEEDED); exit 0. A failure
 * of the whole request prints "elect: FAILED error=NAME message=M" and exits 1.
 */
public final class Main {
  private Main() {}

  public static void main(String[] argv) throws Exception {
    if (argv.length < 1) usage("missing subcommand");
    Opts o = new Opts(Arrays.copyOfRange(argv, 1, argv.length));
    int rc;
    switch (argv[0]) {
      case "create-topic": rc = createTopic(o); break;
      case "describe": rc = describe(o); break;
      case "leader": rc = leader(o); break;
      case "wait": rc = await(o); break;
      case "elect": rc = elect(o); break;
      default: usage("unknown subcommand " + argv[0]); rc = 64;
    }
    System.out.flush();
    System.exit(rc);
  }

  // ------------------------------------------------------------------ options

  static final class Opts {
    final Map<String, List<String>> m = new HashMap<>();

    Opts(String[] a) {
      for (int i = 0; i < a.length; i++) {
        if (!a[i].startsWith("--") || i + 1 >= a.length) usage("bad argument " + a[i]);
        m.computeIfAbsent(a[i].substring(2), k -> new ArrayList<>()).add(a[++i]);
      }
    }

    String str(String k, String def) {
      List<String> v = m.get(k);
      if (v == null) {
        if (def == null) usage("--" + k + " is required");
        return def;
      }
      return v.get(v.size() - 1);
    }

    long num(String k, long def) {
      try {
        return Long.parseLong(str(k, Long.toString(def)));
      } catch (NumberFormatException e) {
        usage("--" + k + " wants a number");
        return def;
      }
    }

    List<String> all(String k) {
      return m.getOrDefault(k, List.of());
    }
  }

  static void usage(String why) {
    System.err.println("cluster-tools: " + why);
    System.err.println("usage: create-topic | describe | leader | wait | elect (see Main.java)");
    System.exit(64);
  }

  static void log(String fmt, Object... args) {
    System.err.println("cluster-tools: " + String.format(fmt, args));
  }

  static Admin admin(Opts o) {
    Properties p = new Properties();
    p.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, o.str("bootstrap", null));
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, "50");
    p.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, "500");
    p.put(AdminClientConfig.RETRY_BACKOFF_MS_CONFIG, "100");
    p.put(AdminClientConfig.RETRY_BACKOFF_MAX_MS_CONFIG, "500");
    // Nodes are killed and paused under us: give up on one quickly and try another.
    p.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "3000");
    p.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "6000");
    p.put(AdminClientConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MS_CONFIG, "1000");
    p.put(AdminClientConfig.SOCKET_CONNECTION_SETUP_TIMEOUT_MAX_MS_CONFIG, "2000");
    p.put(AdminClientConfig.METADATA_MAX_AGE_CONFIG, "1000");
    return Admin.create(p);
  }

  // ------------------------------------------------------------------ describing

  static String ids(List<Node> nodes) {
    if (nodes == null) return "";
    return nodes.stream().map(n -> Integer.toString(n.id())).collect(Collectors.joining(","));
  }

  static String line(String topic, TopicPartitionInfo p) {
    return String.format("partition %s %d leader=%s replicas=%s isr=%s elr=%s last_known_elr=%s",
        topic, p.partition(), p.leader() == null || p.leader().id() < 0 ? "none" : p.leader().id(),
        ids(p.replicas()), ids(p.isr()), ids(p.elr()), ids(p.lastKnownElr()));
  }

  /** describeTopics, retried until the deadline (nodes may be down or not know the topic yet). */
  static Map<String, TopicDescription> topics(Admin admin, List<String> names, long deadline)
      throws InterruptedException {
    Exception last = null;
    for (;;) {
      try {
        return admin.describeTopics(names, new DescribeTopicsOptions().timeoutMs(5000))
            .allTopicNames().get(6, TimeUnit.SECONDS);
      } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
        last = e;
      }
      if (System.currentTimeMillis() > deadline)
        throw new IllegalStateException("describeTopics " + names + " failed: " + last);
      Thread.sleep(100); // poll interval of a deadline-bounded retry
    }
  }

  static List<TopicPartitionInfo> sorted(TopicDescription d) {
    List<TopicPartitionInfo> ps = new ArrayList<>(d.partitions());
    ps.sort((a, b) -> Integer.compare(a.partition(), b.partition()));
    return ps;
  }

  static int describe(Opts o) throws Exception {
    long deadline = System.currentTimeMillis() + o.num("timeout-ms", 30000);
    try (Admin admin = admin(o)) {
      DescribeClusterResult c = null;
      Exception last = null;
      String head = null;
      while (head == null) {
        try {
          c = admin.describeCluster(new DescribeClusterOptions().timeoutMs(5000));
          List<Node> nodes = new ArrayList<>(c.nodes().get(6, TimeUnit.SECONDS));
          nodes.sort((a, b) -> Integer.compare(a.id(), b.id()));
          Node ctl = c.controller().get(6, TimeUnit.SECONDS);
          head = String.format("cluster id=%s controller=%s brokers=%s",
              c.clusterId().get(6, TimeUnit.SECONDS), ctl == null ? "none" : ctl.id(), ids(nodes));
        } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
          last = e;
          if (System.currentTimeMillis() > deadline) {
            log("describeCluster failed: %s", last);
            return 2;
          }
          Thread.sleep(100); // poll interval of a deadline-bounded retry
        }
      }
      System.out.println(head);
      List<String> names = new ArrayList<>(o.all("topic"));
      if (names.isEmpty()) {
        names.addAll(admin.listTopics().names().get(10, TimeUnit.SECONDS));
      }
      names.sort(String::compareTo);
      if (names.isEmpty()) return 0;
      Map<String, TopicDescription> ds;
      try {
        ds = topics(admin, names, deadline);
      } catch (IllegalStateException e) {
        log("%s", e.getMessage());
        return 2;
      }
      for (String t : names) {
        TopicDescription d = ds.get(t);
        System.out.printf("topic %s id=%s partitions=%d%n", t, d.topicId(), d.partitions().size());
        for (TopicPartitionInfo p : sorted(d)) System.out.println(line(t, p));
      }
    }
    return 0;
  }

  static int leader(Opts o) throws Exception {
    String topic = o.str("topic", null);
    int part = (int) o.num("partition", 0);
    long deadline = System.currentTimeMillis() + o.num("timeout-ms", 30000);
    try (Admin admin = admin(o)) {
      TopicDescription d;
      try {
        d = topics(admin, List.of(topic), deadline).get(topic);
      } catch (IllegalStateException e) {
        log("%s", e.getMessage());
        return 2;
      }
      for (TopicPartitionInfo p : d.partitions()) {
        if (p.partition() == part) {
          System.out.println(p.leader() == null || p.leader().id() < 0 ? "none" : p.leader().id());
          return 0;
        }
      }
      log("topic %s has no partition %d", topic, part);
      return 2;
    }
  }

  // ------------------------------------------------------------------ elections

  static int elect(Opts o) throws Exception {
    String type = o.str("type", null);
    ElectionType et = "preferred".equals(type) ? ElectionType.PREFERRED
        : "unclean".equals(type) ? ElectionType.UNCLEAN : null;
    if (et == null) usage("--type is preferred or unclean");
    Set<TopicPartition> tps = null;
    for (String tp : o.all("partition")) {
      int colon = tp.lastIndexOf(':');
      if (colon <= 0) usage("--partition wants TOPIC:PARTITION");
      if (tps == null) tps = new HashSet<>();
      tps.add(new TopicPartition(tp.substring(0, colon), Integer.parseInt(tp.substring(colon + 1))));
    }
    int timeout = (int) o.num("timeout-ms", 20000);
    try (Admin admin = admin(o)) {
      Map<TopicPartition, Optional<Throwable>> res;
      try {
        res = admin.electLeaders(et, tps, new ElectLeadersOptions().timeoutMs(timeout))
            .partitions().get(timeout + 5000L, TimeUnit.MILLISECONDS);
      } catch (ExecutionException e) {
        Throwable c = e.getCause() == null ? e : e.getCause();
        System.out.printf("elect: FAILED error=%s message=%s%n", Errors.forException(c).name(),
            c.getMessage());
        return 1;
      }
      List<String> lines = new ArrayList<>();
      for (Map.Entry<TopicPartition, Optional<Throwable>> e : res.entrySet()) {
        lines.add(String.format("elect %s %d %s", e.getKey().topic(), e.getKey().partition(),
            e.getValue().map(t -> "error=" + Errors.forException(t).name()).orElse("ok")));
      }
      lines.sort(String::compareTo);
      lines.forEach(System.out::println);
    }
    return 0;
  }

  // ------------------------------------------------------------------ conditions

  static boolean holds(String cond, TopicPartitionInfo p) {
    for (String c : cond.split("\\+")) {
      String k = c, v = null;
      int eq = c.indexOf('=');
      if (eq > 0) {
        k = c.substring(0, eq);
        v = c.substring(eq + 1);
      }
      int leader = p.leader() == null ? -1 : p.leader().id();
      List<Integer> isr = p.isr().stream().map(Node::id).collect(Collectors.toList());
      List<Integer> reps = p.replicas().stream().map(Node::id).collect(Collectors.toList());
      boolean ok;
      switch (k) {
        case "leader": ok = leader == Integer.parseInt(v); break;
        case "leader!": ok = leader >= 0 && leader != Integer.parseInt(v); break;
        case "no-leader": ok = leader < 0; break;
        case "has-leader": ok = leader >= 0; break;
        case "isr-size": ok = isr.size() == Integer.parseInt(v); break;
        case "isr-full": ok = isr.size() == reps.size() && isr.containsAll(reps); break;
        case "isr-has": ok = isr.contains(Integer.parseInt(v)); break;
        case "isr-without": ok = !isr.contains(Integer.parseInt(v)); break;
        default: usage("unknown condition " + c); ok = false;
      }
      if (!ok) return false;
    }
    return true;
  }

  static int await(Opts o) throws Exception {
    String topic = o.str("topic", null);
    String which = o.str("partition", "all");
    String cond = o.str("until", null);
    long timeout = o.num("timeout-ms", 60000), hold = o.num("hold-ms", 0);
    long t0 = System.currentTimeMillis(), deadline = t0 + timeout;
    holds(cond, new TopicPartitionInfo(0, null, List.of(), List.of())); // validates the syntax
    try (Admin admin = admin(o)) {
      Map<Integer, String> lines = new LinkedHashMap<>();
      long metAt = -1;
      for (;;) {
        boolean all = true;
        try {
          TopicDescription d = topics(admin, List.of(topic), deadline).get(topic);
          lines.clear();
          boolean any = false;
          for (TopicPartitionInfo p : sorted(d)) {
            if (!which.equals("all") && p.partition() != Integer.parseInt(which)) continue;
            any = true;
            lines.put(p.partition(), line(topic, p));
            all &= holds(cond, p);
          }
          if (!any) {
            log("topic %s has no partition %s", topic, which);
            return 2;
          }
        } catch (IllegalStateException e) {
          all = false;
        }
        long now = System.currentTimeMillis();
        if (all) {
          if (metAt < 0) metAt = now;
          if (now - metAt >= hold) {
            for (String l : lines.values()) System.out.println(l);
            System.out.printf("wait: %s met after %d ms%s%n", cond, metAt - t0,
                hold > 0 ? " and held for " + (now - metAt) + " ms" : "");
            return 0;
          }
        } else if (metAt >= 0) {
          for (String l : lines.values()) System.out.println(l);
          System.out.printf("wait: FAILED: %s held for %d ms only (wanted %d ms)%n", cond,
              now - metAt, hold);
          return 1;
        }
        if (now > deadline) {
          for (String l : lines.values()) System.out.println(l);
          System.out.printf("wait: FAILED: %s not met within %d ms%n", cond, timeout);
          return 1;
        }
        Thread.sleep(100); // poll interval of a deadline-bounded wait
      }
    }
  }

  // ------------------------------------------------------------------ topics

  static int createOnce(Opts o, NewTopic nt) throws Exception {
    long timeout = o.num("timeout-ms", 15000);
    try (Admin admin = admin(o)) {
      try {
        admin.createTopics(List.of(nt),
                new org.apache.kafka.clients.admin.CreateTopicsOptions().timeoutMs((int) timeout))
            .all().get(timeout + 5000, TimeUnit.MILLISECONDS);
        System.out.println("create-topic: ok " + nt.name());
        return 0;
      } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
        Throwable c = e instanceof ExecutionException && e.getCause() != null ? e.getCause() : e;
        if (c instanceof TopicExistsException) {
          System.out.println("create-topic: exists " + nt.name());
          return 0;
        }
        boolean retriable = c instanceof org.apache.kafka.common.errors.RetriableException
            || c instanceof java.util.concurrent.TimeoutException;
        System.out.printf("create-topic: FAILED class=%s retriable=%s message=%s%n",
            c.getClass().getName(), retriable, String.valueOf(c.getMessage()).replace('\n', ' '));
        return 1;
      }
    }
  }

  static int createTopic(Opts o) throws Exception {
    String topic = o.str("topic", null);
    int parts = (int) o.num("partitions", 1);
    short rf = (short) o.num("rf", 3);
    long deadline = System.currentTimeMillis() + o.num("timeout-ms", 60000);
    Map<String, String> cfg = new HashMap<>();
    for (String kv : o.all("config")) {
      int eq = kv.indexOf('=');
      if (eq <= 0) usage("bad --config " + kv);
      cfg.put(kv.substring(0, eq), kv.substring(eq + 1));
    }
    NewTopic nt;
    String assign = o.str("assign", "");
    if (!assign.isEmpty()) {
      Map<Integer, List<Integer>> a = new HashMap<>();
      String[] ps = assign.split(",");
      for (int i = 0; i < ps.length; i++) {
        List<Integer> r = new ArrayList<>();
        for (String n : ps[i].split(":")) r.add(Integer.parseInt(n));
        a.put(i, r);
      }
      nt = new NewTopic(topic, a);
      parts = ps.length;
    } else {
      nt = new NewTopic(topic, parts, rf);
    }
    nt.configs(cfg);
    if (o.str("once", "false").equals("true")) return createOnce(o, nt);
    try (Admin admin = admin(o)) {
      try {
        admin.createTopics(List.of(nt)).all().get(30, TimeUnit.SECONDS);
      } catch (ExecutionException e) {
        if (!(e.getCause() instanceof TopicExistsException)) throw e;
        log("topic %s exists already", topic);
      }
      // Ready when every partition has a leader and its whole replica set in the ISR.
      for (;;) {
        try {
          TopicDescription d = topics(admin, List.of(topic), deadline).get(topic);
          boolean ok = d.partitions().size() == parts;
          for (TopicPartitionInfo p : d.partitions()) ok &= holds("has-leader+isr-full", p);
          if (ok) {
            System.out.printf("created %s id=%s partitions=%d%n", topic, d.topicId(), parts);
            for (TopicPartitionInfo p : sorted(d)) System.out.println(line(topic, p));
            return 0;
          }
        } catch (IllegalStateException e) {
          // not known yet: retry until the deadline
        }
        if (System.currentTimeMillis() > deadline) {
          log("topic %s: not every partition has a leader and a full ISR in time", topic);
          return 2;
        }
        Thread.sleep(100); // poll interval of a deadline-bounded wait
      }
    }
  }
}
