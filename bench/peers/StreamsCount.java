// The Kafka Streams peer of bench/native.py (bench/PEERS.md §4): the same job
// as the Beam pipeline there. Input records have a null key and a word as the
// value; the word becomes the key, goes through a repartition topic, and a
// count per word is emitted for every input record (cache 0), carrying the
// input record's timestamp.
//   java -cp "$KAFKA_LIBS/*:$KS/*:$KS/classes" StreamsCount BOOTSTRAP IN OUT APP_ID STATE_DIR [eos|alo] [PARTITIONS]
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.state.KeyValueStore;

public class StreamsCount {
  public static void main(String[] a) throws Exception {
    Properties p = new Properties();
    p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, a[0]);
    p.put(StreamsConfig.APPLICATION_ID_CONFIG, a[3]);
    p.put(StreamsConfig.STATE_DIR_CONFIG, a[4]);
    boolean eos = a.length < 6 || a[5].equals("eos");
    p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, eos ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
    p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, 100);
    p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);  // one output record per input record
    p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, 1);
    p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
    int parts = a.length > 6 ? Integer.parseInt(a[6]) : 1;
    StreamsBuilder b = new StreamsBuilder();
    b.stream(a[1], Consumed.with(Serdes.String(), Serdes.String()))
        .selectKey((k, v) -> v)
        .repartition(Repartitioned.<String, String>as("by-key").withKeySerde(Serdes.String())
            .withValueSerde(Serdes.String()).withNumberOfPartitions(parts))
        .groupByKey()
        .count(Materialized.<String, Long, KeyValueStore<Bytes, byte[]>>as("counts"))
        .toStream().to(a[2], Produced.with(Serdes.String(), Serdes.Long()));
    KafkaStreams ks = new KafkaStreams(b.build(), p);
    CountDownLatch stop = new CountDownLatch(1);
    // The harness reads stdout: it waits for RUNNING, and a dead app says so.
    ks.setStateListener((now, before) -> System.out.println("STATE " + before + " -> " + now));
    Runtime.getRuntime().addShutdownHook(new Thread(() -> { ks.close(Duration.ofSeconds(10)); stop.countDown(); }));
    ks.start();
    stop.await();
  }
}
