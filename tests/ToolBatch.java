import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.LockSupport;

import org.apache.kafka.common.utils.Exit;

/**
 * Several Kafka tool runs in one JVM (a JVM start costs ~1-2 s a run): args RUNS MARKER. RUNS is
 * a file of one run a line, the main class and its arguments separated by \u0001. Each run's
 * main is called in a thread of its own, in turn. Kafka's Exit.exit (every tool exits through
 * it) ends the run with its status: the calling thread stops there for good, as a JVM would, so
 * that nothing a tool does after its exit (a catch that prints, a second exit) is seen; a main
 * that returns is status 0, one that throws prints the exception and is status 1. After each
 * run a line "MARKER index status" goes to stdout and "MARKER index" to stderr, so that the
 * caller splits both streams by run (tests/kafka_reference.py, KafkaJars.run_tools).
 */
public final class ToolBatch {
    private static volatile CompletableFuture<Integer> current;

    public static void main(String[] args) throws Exception {
        Exit.setExitProcedure((status, message) -> stopHere(status));
        Exit.setHaltProcedure((status, message) -> stopHere(status));
        List<String> runs = Files.readAllLines(Paths.get(args[0]), StandardCharsets.UTF_8);
        String marker = args[1];
        for (int i = 0; i < runs.size(); i++) {
            String[] parts = runs.get(i).split("\u0001", -1);
            CompletableFuture<Integer> done = new CompletableFuture<>();
            current = done;
            Thread tool = new Thread(() -> {
                try {
                    Method main = Class.forName(parts[0]).getMethod("main", String[].class);
                    main.invoke(null, (Object) Arrays.copyOfRange(parts, 1, parts.length));
                    done.complete(0);
                } catch (InvocationTargetException e) {
                    e.getCause().printStackTrace();
                    done.complete(1);
                } catch (ReflectiveOperationException e) {
                    e.printStackTrace();
                    done.complete(1);
                }
            }, "tool-" + i);
            tool.setDaemon(true);
            tool.start();
            int status = done.get();
            System.out.flush();
            System.err.flush();
            System.out.println(marker + " " + i + " " + status);
            System.err.println(marker + " " + i);
            System.out.flush();
            System.err.flush();
        }
        Runtime.getRuntime().halt(0);  // the runs' threads and shutdown hooks end with the JVM
    }

    /** A tool's exit: the run's status is the first exit's; the calling thread goes no further. */
    private static void stopHere(int status) {
        current.complete(status);
        while (true) {
            LockSupport.park();
        }
    }
}
