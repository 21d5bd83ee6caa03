import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;

import org.apache.kafka.common.KafkaException;

/**
 * What the checks (JavaClientCheck, TransactionCheck) print, one JSON object a line: each step's
 * outcome ({LABEL: name, "ok": true, what the step returned...} or {..., "ok": false, "error":
 * class, "message": text}, then "elapsed_ms").
 */
final class CheckOutput {
    private CheckOutput() {
    }

    interface Step {
        Map<String, Object> call() throws Exception;
    }

    /** Runs STEP and prints its outcome; a failure is reported by its cause, never thrown. */
    static void report(String label, String name, Step step) {
        long t0 = System.nanoTime();
        Map<String, Object> out = new LinkedHashMap<>();
        out.put(label, name);
        try {
            Map<String, Object> res = step.call();
            out.put("ok", true);
            out.putAll(res);
        } catch (Throwable e) {
            Throwable cause = unwrap(e);
            out.put("ok", false);
            out.put("error", cause.getClass().getSimpleName());
            out.put("message", String.valueOf(cause.getMessage()));
        }
        out.put("elapsed_ms", (System.nanoTime() - t0) / 1_000_000);
        print(out);
    }

    static void print(Map<String, Object> row) {
        System.out.println(json(row));
        System.out.flush();
    }

    /** The error a caller should see: below the ExecutionException and the KafkaException wrappers. */
    static Throwable unwrap(Throwable e) {
        Throwable cause = e;
        while ((cause instanceof ExecutionException || cause instanceof KafkaException
                && cause.getCause() instanceof KafkaException) && cause.getCause() != null) {
            cause = cause.getCause();
        }
        return cause;
    }

    static String json(Object o) {
        if (o == null) {
            return "null";
        }
        if (o instanceof String s) {
            StringBuilder sb = new StringBuilder("\"");
            for (char ch : s.toCharArray()) {
                if (ch == '"' || ch == '\\') {
                    sb.append('\\').append(ch);
                } else if (ch < 0x20) {
                    sb.append(String.format("\\u%04x", (int) ch));
                } else {
                    sb.append(ch);
                }
            }
            return sb.append('"').toString();
        }
        if (o instanceof Number || o instanceof Boolean) {
            return o.toString();
        }
        if (o instanceof Map<?, ?> m) {
            List<String> parts = new ArrayList<>();
            for (Map.Entry<?, ?> e : m.entrySet()) {
                parts.add(json(String.valueOf(e.getKey())) + ":" + json(e.getValue()));
            }
            return "{" + String.join(",", parts) + "}";
        }
        if (o instanceof Collection<?> c) {
            List<String> parts = new ArrayList<>();
            for (Object x : c) {
                parts.add(json(x));
            }
            return "[" + String.join(",", parts) + "]";
        }
        return json(o.toString());
    }
}
