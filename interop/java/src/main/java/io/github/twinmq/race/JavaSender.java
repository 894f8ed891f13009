package io.github.twinmq.race;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.EnumMap;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.client.producer.SendStatus;
import org.apache.rocketmq.common.message.Message;

/**
 * The Java side of the send race of {@code make interop}: N threads doing
 * synchronous {@code send()} of fixed-size bodies with RocketMQ's own Java
 * client (remoting, straight to the broker found through the name server)
 * for a warm-up and then a measured window.
 *
 * <pre>
 * JavaSender NAMESRV TOPIC BODY_BYTES MODE SENDERS WARMUP_S WINDOW_S   one run
 * JavaSender NAMESRV TOPIC BODY_BYTES                                   runs read from stdin
 * </pre>
 *
 * In the second form each line of standard input is one run,
 * {@code MODE SENDERS WARMUP_S WINDOW_S}, answered by one line on standard
 * output; the program exits at the end of its input. That is how the Go
 * benchmark drives it: one JVM for the whole race, so that the client's code
 * is compiled once, as in a long-lived application, and not once per round.
 *
 * <p>MODE is {@code unbatched} (a plain DefaultMQProducer) or
 * {@code autobatch} (the same with AutoBatch on: 10 ms max delay, 32 KiB per
 * batch, 32 MiB held in total). Each mode has its own producer (its own
 * client instance and connections), started on first use and kept for the
 * life of the program.
 *
 * <p>The answer is one line of space-separated key=value pairs:
 * <pre>
 * RACE mode=autobatch senders=64 sent=812345 msgs_s=162469.0 p50_ms=0.391 p99_ms=1.207 errors=0 gc_ms=35
 * </pre>
 * msgs_s counts the sends that completed inside the window; p50 and p99 are
 * the latencies of those sends; errors counts failed sends (an exception or
 * a status other than SEND_OK) over the whole run, the first of which is
 * printed on standard error; gc_ms is the time the JVM spent in garbage
 * collection during the run. A run with errors is still answered: the
 * caller decides.
 */
public final class JavaSender {
    /** Producer group of every producer of this program. */
    private static final String GROUP = "twinmq_race_java";
    /** Per-request timeout; long, so that a loaded machine slows the race down instead of failing it. */
    private static final int SEND_TIMEOUT_MS = 10_000;

    enum Mode {
        UNBATCHED, AUTOBATCH;

        static Mode parse(String s) {
            switch (s) {
                case "unbatched":
                    return UNBATCHED;
                case "autobatch":
                    return AUTOBATCH;
                default:
                    throw new IllegalArgumentException("mode must be unbatched or autobatch, not " + s);
            }
        }

        String label() {
            return name().toLowerCase(Locale.ROOT);
        }
    }

    private final String namesrv;
    private final String topic;
    private final byte[] body;
    private final Map<Mode, DefaultMQProducer> producers = new EnumMap<>(Mode.class);

    private JavaSender(String namesrv, String topic, int bodySize) {
        this.namesrv = namesrv;
        this.topic = topic;
        this.body = new byte[bodySize];
        for (int i = 0; i < bodySize; i++) {
            body[i] = (byte) ('a' + i % 26);
        }
    }

    public static void main(String[] args) {
        if (args.length != 3 && args.length != 7) {
            System.err.println("usage: JavaSender NAMESRV TOPIC BODY_BYTES [MODE SENDERS WARMUP_S WINDOW_S]");
            System.exit(2);
        }
        int status = 0;
        JavaSender race = new JavaSender(args[0], args[1], Integer.parseInt(args[2]));
        try {
            if (args.length == 7) {
                System.out.println(race.run(Arrays.copyOfRange(args, 3, 7)));
            } else {
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
                String line;
                while ((line = in.readLine()) != null) {
                    line = line.trim();
                    if (line.isEmpty()) {
                        continue;
                    }
                    System.out.println(race.run(line.split("\\s+")));
                    System.out.flush();
                }
            }
        } catch (Exception e) {
            System.err.println("race failed: " + e);
            e.printStackTrace();
            status = 1;
        } finally {
            race.close();
        }
        // The client leaves non-daemon threads behind; do not wait for them.
        System.exit(status);
    }

    /** run executes one command: MODE SENDERS WARMUP_S WINDOW_S. */
    private String run(String[] cmd) throws Exception {
        if (cmd.length != 4) {
            throw new IllegalArgumentException("a run is MODE SENDERS WARMUP_S WINDOW_S, got " + String.join(" ", cmd));
        }
        Mode mode = Mode.parse(cmd[0]);
        int senders = Integer.parseInt(cmd[1]);
        long warmupNs = (long) (Double.parseDouble(cmd[2]) * 1e9);
        long windowNs = (long) (Double.parseDouble(cmd[3]) * 1e9);
        if (senders <= 0 || warmupNs < 0 || windowNs <= 0) {
            throw new IllegalArgumentException("senders and window must be positive: " + String.join(" ", cmd));
        }
        DefaultMQProducer producer = producer(mode);

        long gc0 = gcMillis();
        long start = System.nanoTime();
        long from = start + warmupNs;
        long to = from + windowNs;
        AtomicLong errors = new AtomicLong();
        AtomicReference<Throwable> firstError = new AtomicReference<>();
        Sender[] workers = new Sender[senders];
        Thread[] threads = new Thread[senders];
        for (int i = 0; i < senders; i++) {
            workers[i] = new Sender(producer, from, to, errors, firstError);
            threads[i] = new Thread(workers[i], "race-sender-" + i);
            threads[i].start();
        }
        for (Thread t : threads) {
            t.join();
        }
        long gcMs = gcMillis() - gc0;

        int n = 0;
        for (Sender w : workers) {
            n += w.count;
        }
        long[] all = new long[n];
        int k = 0;
        for (Sender w : workers) {
            System.arraycopy(w.lat, 0, all, k, w.count);
            k += w.count;
        }
        Arrays.sort(all);
        Throwable first = firstError.get();
        if (first != null) {
            System.err.println("race: " + errors.get() + " sends failed; first: " + first);
        }
        return String.format(Locale.ROOT,
            "RACE mode=%s senders=%d sent=%d msgs_s=%.1f p50_ms=%.3f p99_ms=%.3f errors=%d gc_ms=%d",
            mode.label(), senders, n, n / (windowNs / 1e9), pct(all, 0.50), pct(all, 0.99), errors.get(), gcMs);
    }

    /** pct is the q-quantile of sorted nanosecond latencies, in milliseconds (0 for none). */
    private static double pct(long[] sorted, double q) {
        if (sorted.length == 0) {
            return 0;
        }
        int i = Math.min(sorted.length - 1, (int) (q * sorted.length));
        return sorted[i] / 1e6;
    }

    private static long gcMillis() {
        long ms = 0;
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            ms += Math.max(0, gc.getCollectionTime());
        }
        return ms;
    }

    /** producer returns the started producer of mode, starting it on first use. */
    private DefaultMQProducer producer(Mode mode) throws Exception {
        DefaultMQProducer p = producers.get(mode);
        if (p != null) {
            return p;
        }
        p = new DefaultMQProducer(GROUP + "_" + mode.label());
        p.setNamesrvAddr(namesrv);
        // Its own client instance, hence its own connections, per mode.
        p.setInstanceName("race-" + mode.label());
        p.setSendMsgTimeout(SEND_TIMEOUT_MS);
        if (mode == Mode.AUTOBATCH) {
            p.setAutoBatch(true);
            p.batchMaxDelayMs(10);
            p.batchMaxBytes(32L * 1024);
            p.totalBatchMaxBytes(32L * 1024 * 1024);
        }
        p.start();
        producers.put(mode, p);
        return p;
    }

    private void close() {
        for (DefaultMQProducer p : producers.values()) {
            try {
                p.shutdown();
            } catch (RuntimeException e) {
                System.err.println("race: shutdown: " + e);
            }
        }
        producers.clear();
    }

    /** One sending thread: sends until the window ends, keeps the latencies of sends completed inside it. */
    private final class Sender implements Runnable {
        private final DefaultMQProducer producer;
        private final long from;
        private final long to;
        private final AtomicLong errors;
        private final AtomicReference<Throwable> firstError;
        long[] lat = new long[1 << 14];
        int count;

        Sender(DefaultMQProducer producer, long from, long to, AtomicLong errors, AtomicReference<Throwable> firstError) {
            this.producer = producer;
            this.from = from;
            this.to = to;
            this.errors = errors;
            this.firstError = firstError;
        }

        @Override
        public void run() {
            while (true) {
                long t0 = System.nanoTime();
                if (t0 - to >= 0) {
                    return;
                }
                try {
                    SendResult r = producer.send(new Message(topic, body));
                    if (r.getSendStatus() != SendStatus.SEND_OK) {
                        fail(new IllegalStateException("send status " + r.getSendStatus()));
                        continue;
                    }
                } catch (Exception e) {
                    fail(e);
                    continue;
                }
                long t1 = System.nanoTime();
                if (t1 - from >= 0 && t1 - to <= 0) {
                    if (count == lat.length) {
                        lat = Arrays.copyOf(lat, lat.length * 2);
                    }
                    lat[count++] = t1 - t0;
                }
            }
        }

        private void fail(Throwable e) {
            errors.incrementAndGet();
            firstError.compareAndSet(null, e);
        }
    }
}
