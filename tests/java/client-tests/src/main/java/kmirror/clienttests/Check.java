package kmirror.clienttests;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.function.BooleanSupplier;

/** The suite's check runner: one named test at a time, a closing "N passed, N failed" line. */
final class Check {
    interface Body {
        void run() throws Exception;
    }

    /** A failed expectation (as opposed to an unexpected exception, reported with its type). */
    static final class Failure extends RuntimeException {
        Failure(String msg) {
            super(msg);
        }
    }

    private final PrintStream out;
    private final List<String> only;
    private int passed;
    private int failed;

    Check(PrintStream out, List<String> only) {
        this.out = out;
        this.only = only;
    }

    /** Runs one test; returns true when it passed. */
    boolean test(String name, Body body) {
        if (!only.isEmpty() && only.stream().noneMatch(name::contains)) return true;
        long t0 = System.nanoTime();
        try {
            body.run();
        } catch (Failure f) {
            fail(name, t0, f.getMessage());
            return false;
        } catch (Throwable t) {
            Throwable c = t;
            StringBuilder why = new StringBuilder();
            while (c != null) {
                if (why.length() > 0) why.append(" <- ");
                why.append(c.getClass().getSimpleName()).append(": ").append(c.getMessage());
                c = c.getCause() == c ? null : c.getCause();
            }
            StackTraceElement[] st = t.getStackTrace();
            for (StackTraceElement e : st) {
                if (e.getClassName().startsWith("kmirror.")) {
                    why.append(" (at ").append(e.getFileName()).append(':').append(e.getLineNumber()).append(')');
                    break;
                }
            }
            fail(name, t0, why.toString());
            return false;
        }
        passed++;
        out.printf("PASS %s (%.1f s)%n", name, (System.nanoTime() - t0) / 1e9);
        out.flush();
        return true;
    }

    /** Reports a test that could not run (its prerequisite failed) as failed. */
    void notRun(String name, String why) {
        fail(name, System.nanoTime(), "not run: " + why);
    }

    private void fail(String name, long t0, String why) {
        failed++;
        out.printf("FAIL %s (%.1f s): %s%n", name, (System.nanoTime() - t0) / 1e9, why);
        out.flush();
    }

    int finish() {
        out.printf("%d passed, %d failed%n", passed, failed);
        out.flush();
        return failed == 0 && passed > 0 ? 0 : 1;
    }

    static void expect(boolean cond, String fmt, Object... args) {
        if (!cond) throw new Failure(String.format(fmt, args));
    }

    static void expectEq(Object got, Object want, String what) {
        if (!Objects.equals(got, want)) throw new Failure(what + ": got " + got + ", expected " + want);
    }

    /** Polls cond until it holds or timeoutMs passes (cond may itself block, e.g. a consumer poll). */
    static void waitUntil(BooleanSupplier cond, long timeoutMs, String what) throws InterruptedException {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new Failure("timed out after " + timeoutMs + " ms waiting for " + what);
            Thread.sleep(20);
        }
    }

    /** Like waitUntil for conditions that block in a consumer poll: no pause between rounds. */
    static void pollUntil(BooleanSupplier cond, long timeoutMs, String what) {
        long deadline = System.nanoTime() + timeoutMs * 1_000_000L;
        while (!cond.getAsBoolean()) {
            if (System.nanoTime() > deadline) throw new Failure("timed out after " + timeoutMs + " ms waiting for " + what);
        }
    }

    static List<String> list(String... xs) {
        return new ArrayList<>(List.of(xs));
    }
}
