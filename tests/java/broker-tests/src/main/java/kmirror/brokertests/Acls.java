package kmirror.brokertests;

import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.CreateAclsResult;
import org.apache.kafka.clients.admin.DeleteAclsResult;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AccessControlEntryFilter;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.InvalidRequestException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourcePatternFilter;
import org.apache.kafka.common.resource.ResourceType;

/**
 * The Java AdminClient (4.x) ACL calls against kbroker with an authorizer configured.
 * Usage: Acls BOOTSTRAP create|restart.
 * "create": createAcls (valid, an existing one, a bad CLUSTER name), describeAcls with LITERAL,
 * PREFIXED, MATCH and ANY filters, deleteAcls with several filters; leaves "jv-keep" behind.
 * "restart" (after a kbroker restart and the Python client's restart phase): "jv-keep" is still
 * there, the Python client's "py-keep" is gone; deletes it, nothing is left.
 * Prints one line per check; exit 1 on any failure.
 */
public final class Acls {
    private static int failures = 0;

    private static void check(boolean ok, String what) {
        System.out.println((ok ? "ok: " : "FAIL: ") + "java " + what);
        if (!ok) {
            failures++;
        }
    }

    private static AclBinding acl(ResourceType rt, String name, PatternType pt, String principal,
                                  String host, AclOperation op, AclPermissionType perm) {
        return new AclBinding(new ResourcePattern(rt, name, pt),
                              new AccessControlEntry(principal, host, op, perm));
    }

    private static AclBindingFilter filter(ResourceType rt, String name, PatternType pt,
                                           String principal, AclOperation op) {
        return new AclBindingFilter(new ResourcePatternFilter(rt, name, pt),
                                    new AccessControlEntryFilter(principal, null, op,
                                                                 AclPermissionType.ANY));
    }

    /* The bindings matching f, without those the Python client's phase left ("py-keep"). */
    private static Set<AclBinding> describe(Admin admin, AclBindingFilter f) throws Exception {
        Set<AclBinding> s = new HashSet<>(admin.describeAcls(f).values().get());
        s.removeIf(b -> b.pattern().name().equals("py-keep"));
        return s;
    }

    public static void main(String[] args) throws Exception {
        Properties ap = new Properties();
        ap.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        ap.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, "20000");
        ap.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        try (Admin admin = Admin.create(ap)) {
            if (args[1].equals("create")) {
                create(admin);
            } else {
                restart(admin);
            }
        }
        if (failures > 0) {
            System.out.println(failures + " failure(s)");
            System.exit(1);
        }
        System.out.println("PASS");
    }

    private static final AclBinding KEEP =
        acl(ResourceType.GROUP, "jv-keep", PatternType.PREFIXED, "User:jkeeper", "*",
            AclOperation.ALL, AclPermissionType.DENY);

    private static void create(Admin admin) throws Exception {
        AclBinding a0 = acl(ResourceType.TOPIC, "jv-orders", PatternType.LITERAL, "User:alice",
                            "*", AclOperation.READ, AclPermissionType.ALLOW);
        AclBinding a1 = acl(ResourceType.TOPIC, "jv-orders", PatternType.LITERAL, "User:bob",
                            "10.1.1.1", AclOperation.WRITE, AclPermissionType.DENY);
        AclBinding a2 = acl(ResourceType.TOPIC, "jv-", PatternType.PREFIXED, "User:alice", "*",
                            AclOperation.DESCRIBE, AclPermissionType.ALLOW);
        AclBinding a3 = acl(ResourceType.TRANSACTIONAL_ID, "jv-tx", PatternType.LITERAL,
                            "User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW);
        AclBinding a4 = acl(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL,
                            "User:alice", "*", AclOperation.IDEMPOTENT_WRITE,
                            AclPermissionType.ALLOW);
        List<AclBinding> all = List.of(a0, a1, a2, a3, a4, KEEP);
        admin.createAcls(all).all().get();
        check(describe(admin, AclBindingFilter.ANY).equals(new HashSet<>(all)),
              "createAcls + describeAcls ANY: all 6");
        admin.createAcls(List.of(a0)).all().get();
        check(describe(admin, AclBindingFilter.ANY).size() == all.size(),
              "createAcls of an existing binding: no duplicate");

        AclBinding bad = acl(ResourceType.CLUSTER, "my-cluster", PatternType.LITERAL,
                             "User:alice", "*", AclOperation.ALTER, AclPermissionType.ALLOW);
        CreateAclsResult cr = admin.createAcls(List.of(bad, a0));
        try {
            cr.values().get(bad).get();
            check(false, "createAcls CLUSTER my-cluster refused");
        } catch (ExecutionException e) {
            check(e.getCause() instanceof InvalidRequestException
                      && e.getCause().getMessage().contains("kafka-cluster"),
                  "createAcls CLUSTER my-cluster refused: " + e.getCause());
        }
        cr.values().get(a0).get();
        check(true, "createAcls: the valid binding of the same request succeeds");

        check(describe(admin, filter(ResourceType.TOPIC, "jv-orders", PatternType.LITERAL, null,
                                     AclOperation.ANY))
                  .equals(Set.of(a0, a1)),
              "describeAcls LITERAL jv-orders");
        check(describe(admin, filter(ResourceType.TOPIC, "jv-orders", PatternType.MATCH, null,
                                     AclOperation.ANY))
                  .equals(Set.of(a0, a1, a2)),
              "describeAcls MATCH jv-orders: literal and prefixed");
        check(describe(admin, filter(ResourceType.ANY, null, PatternType.ANY, "User:bob",
                                     AclOperation.ANY))
                  .equals(Set.of(a1)),
              "describeAcls by principal");
        check(describe(admin, filter(ResourceType.CLUSTER, null, PatternType.ANY, null,
                                     AclOperation.IDEMPOTENT_WRITE))
                  .equals(Set.of(a4)),
              "describeAcls CLUSTER IDEMPOTENT_WRITE");

        AclBindingFilter f0 = filter(ResourceType.TOPIC, "jv-orders", PatternType.MATCH, null,
                                     AclOperation.ANY);
        AclBindingFilter f1 = filter(ResourceType.TRANSACTIONAL_ID, null, PatternType.ANY, null,
                                     AclOperation.ANY);
        DeleteAclsResult dr = admin.deleteAcls(List.of(f0, f1));
        Map<AclBindingFilter, org.apache.kafka.common.KafkaFuture<DeleteAclsResult.FilterResults>>
            per = dr.values();
        Set<AclBinding> r0 = new HashSet<>();
        for (DeleteAclsResult.FilterResult r : per.get(f0).get().values()) {
            r0.add(r.binding());
        }
        check(r0.equals(Set.of(a0, a1, a2)), "deleteAcls MATCH jv-orders: " + r0);
        check(per.get(f1).get().values().size() == 1
                  && per.get(f1).get().values().get(0).binding().equals(a3),
              "deleteAcls TRANSACTIONAL_ID");
        Collection<AclBinding> gone = admin.deleteAcls(
            List.of(filter(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL, null,
                           AclOperation.ANY))).all().get();
        check(gone.size() == 1, "deleteAcls CLUSTER");
        check(describe(admin, filter(ResourceType.ANY, null, PatternType.ANY, "User:jkeeper",
                                     AclOperation.ANY))
                  .equals(Set.of(KEEP)),
              "jv-keep left for the restart");
    }

    private static void restart(Admin admin) throws Exception {
        check(new HashSet<>(admin.describeAcls(AclBindingFilter.ANY).values().get())
                  .equals(Set.of(KEEP)),
              "after the restart: exactly jv-keep (py-keep deleted by the Python client)");
        Collection<AclBinding> gone = admin.deleteAcls(List.of(AclBindingFilter.ANY)).all().get();
        check(gone.size() == 1 && gone.contains(KEEP), "deleteAcls ANY");
        check(describe(admin, AclBindingFilter.ANY).isEmpty(), "no binding left");
    }
}
