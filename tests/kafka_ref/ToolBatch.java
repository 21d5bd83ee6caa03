import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;

import org.apache.kafka.common.utils.Exit;

/**
 * Runs one Kafka command-line tool (its main class, the first argument) several times in this
 * one JVM: each line of stdin is one invocation's arguments, tab-separated. Prints, for each,
 * "=== <n> <exit code>" and then what the tool printed (stdout and stderr together), so that a
 * test pays one JVM start for many invocations. An Exit.exit of the tool ends its invocation,
 * not the JVM.
 */
public class ToolBatch {
    static final class Exited extends RuntimeException {
        final int code;
        Exited(int code) { super("exit " + code); this.code = code; }
    }

    public static void main(String[] args) throws Exception {
        Method main = Class.forName(args[0]).getMethod("main", String[].class);
        Exit.setExitProcedure((code, message) -> { throw new Exited(code); });
        Exit.setHaltProcedure((code, message) -> { throw new Exited(code); });
        PrintStream out = System.out, err = System.err;
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        int n = 0;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) continue;
            ByteArrayOutputStream buffer = new ByteArrayOutputStream();
            PrintStream captured = new PrintStream(buffer, true, StandardCharsets.UTF_8);
            System.setOut(captured);
            System.setErr(captured);
            int code = 0;
            try {
                main.invoke(null, (Object) line.split("\t"));
            } catch (InvocationTargetException e) {
                Throwable cause = e.getCause();
                if (cause instanceof Exited) {
                    code = ((Exited) cause).code;
                } else {
                    code = 1;
                    cause.printStackTrace(captured);
                }
            } finally {
                captured.flush();
                System.setOut(out);
                System.setErr(err);
            }
            out.println("=== " + n++ + " " + code);
            out.print(buffer.toString(StandardCharsets.UTF_8));
            out.flush();
        }
    }
}
