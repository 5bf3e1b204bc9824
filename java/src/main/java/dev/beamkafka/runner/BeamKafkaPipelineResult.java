package dev.beamkafka.runner;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.beam.model.jobmanagement.v1.JobApi;
import org.apache.beam.model.jobmanagement.v1.JobApi.JobMessage;
import org.apache.beam.model.jobmanagement.v1.JobApi.JobMessagesResponse;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc;
import org.apache.beam.model.jobmanagement.v1.JobServiceGrpc.JobServiceBlockingStub;
import org.apache.beam.sdk.PipelineResult;
import org.apache.beam.sdk.metrics.MetricResults;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.ManagedChannel;
import org.apache.beam.vendor.grpc.v1p69p0.io.grpc.StatusRuntimeException;
import org.joda.time.Duration;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A job on the job server. Two daemon threads follow it: one its state stream (falling back to
 * polling GetState should the stream break), one its message stream, which is logged. Once the
 * job ended, its metrics are read a last time and the channel and this JVM's worker pool close.
 */
public class BeamKafkaPipelineResult implements PipelineResult {
  private static final Logger LOG = LoggerFactory.getLogger(BeamKafkaPipelineResult.class);

  private final String jobId;
  private final ManagedChannel channel;
  private final AutoCloseable workerPool;
  private final int timeoutSecs;
  private final JobServiceBlockingStub jobService;
  private final CompletableFuture<State> terminal = new CompletableFuture<>();
  private final List<String> errors = new CopyOnWriteArrayList<>();
  private final Thread messages;
  private volatile State lastState = State.RUNNING;
  private volatile MetricResults finalMetrics;
  private boolean closed;

  BeamKafkaPipelineResult(
      String jobId, ManagedChannel channel, AutoCloseable workerPool, int timeoutSecs) {
    this.jobId = jobId;
    this.channel = channel;
    this.workerPool = workerPool;
    this.timeoutSecs = timeoutSecs;
    this.jobService = JobServiceGrpc.newBlockingStub(channel);
    daemon("beam-kafka-state-" + jobId, this::followState).start();
    messages = daemon("beam-kafka-messages-" + jobId, this::followMessages);
    messages.start();
  }

  public String getJobId() {
    return jobId;
  }

  /** The job's error messages (JOB_MESSAGE_ERROR) received so far. */
  public List<String> getErrors() {
    return new ArrayList<>(errors);
  }

  @Override
  public State getState() {
    if (terminal.isDone()) {
      return terminal.join();
    }
    try {
      return toJava(jobService.getState(stateRequest()).getState());
    } catch (StatusRuntimeException e) {
      LOG.warn("GetState of {} failed: {}", jobId, e.getStatus());
      return lastState;
    }
  }

  /** Asks the server to cancel the job and waits (up to the job server timeout) for its end. */
  @Override
  public State cancel() {
    if (!terminal.isDone()) {
      jobService
          .withDeadlineAfter(timeoutSecs, TimeUnit.SECONDS)
          .cancel(JobApi.CancelJobRequest.newBuilder().setJobId(jobId).build());
    }
    State state = waitUntilFinish(Duration.standardSeconds(timeoutSecs));
    return state == null ? getState() : state;
  }

  @Override
  public State waitUntilFinish(Duration duration) {
    if (duration == null || duration.getMillis() < 1) {
      return waitUntilFinish();
    }
    return awaitTerminal(duration.getMillis());
  }

  @Override
  public State waitUntilFinish() {
    return awaitTerminal(0);
  }

  /** Waits for the job to end, at most {@code millis} (0: no limit); null while it still runs. */
  private State awaitTerminal(long millis) {
    try {
      if (millis > 0) {
        terminal.get(millis, TimeUnit.MILLISECONDS);
      } else {
        terminal.get();
      }
    } catch (TimeoutException e) {
      return null; // Beam's convention for "still running".
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new RuntimeException(e);
    } catch (ExecutionException e) {
      // The job server was lost; finish below rethrows.
    }
    return finish();
  }

  /** The job's metrics: the final ones once it ended, else the server's current aggregate. */
  @Override
  public MetricResults metrics() {
    MetricResults done = finalMetrics;
    return done != null ? done : fetchMetrics();
  }

  private synchronized State finish() {
    State state;
    try {
      state = terminal.join();
    } catch (RuntimeException e) {
      close();
      throw new RuntimeException("Lost the job " + jobId + " on the job server", e.getCause());
    }
    if (!closed) {
      try {
        messages.join(TimeUnit.SECONDS.toMillis(5)); // The last messages say why a job failed.
      } catch (InterruptedException e) {
        Thread.currentThread().interrupt();
      }
      try {
        finalMetrics = fetchMetrics();
      } catch (StatusRuntimeException e) {
        LOG.warn("Cannot read the metrics of {}: {}", jobId, e.getStatus());
      }
      close();
      if (state == State.FAILED) {
        LOG.error("Job {} failed: {}", jobId, String.join("\n", errors));
      } else {
        LOG.info("Job {} ended {}", jobId, state);
      }
    }
    return state;
  }

  private synchronized void close() {
    if (!closed) {
      closed = true;
      channel.shutdownNow();
      BeamKafkaRunner.closeQuietly(workerPool);
    }
  }

  private MetricResults fetchMetrics() {
    JobApi.MetricResults m =
        jobService
            .withDeadlineAfter(timeoutSecs, TimeUnit.SECONDS)
            .getJobMetrics(JobApi.GetJobMetricsRequest.newBuilder().setJobId(jobId).build())
            .getMetrics();
    return BeamKafkaMetrics.of(m);
  }

  private JobApi.GetJobStateRequest stateRequest() {
    return JobApi.GetJobStateRequest.newBuilder().setJobId(jobId).build();
  }

  private void followState() {
    try {
      Iterator<JobApi.JobStateEvent> events = jobService.getStateStream(stateRequest());
      while (events.hasNext()) {
        if (record(toJava(events.next().getState()))) {
          return;
        }
      }
    } catch (StatusRuntimeException e) {
      LOG.debug("State stream of {} broke: {}; polling", jobId, e.getStatus());
    }
    // The stream ended early (e.g. the server restarted): poll, giving up after the timeout.
    long lastAnswer = System.nanoTime();
    while (!terminal.isDone()) {
      try {
        if (record(toJava(jobService.getState(stateRequest()).getState()))) {
          return;
        }
        lastAnswer = System.nanoTime();
      } catch (StatusRuntimeException e) {
        if (System.nanoTime() - lastAnswer > TimeUnit.SECONDS.toNanos(timeoutSecs)) {
          terminal.completeExceptionally(e);
          return;
        }
      }
      sleep(1000);
    }
  }

  private boolean record(State state) {
    lastState = state;
    if (state.isTerminal()) {
      terminal.complete(state);
      return true;
    }
    return false;
  }

  private void followMessages() {
    try {
      Iterator<JobMessagesResponse> it =
          jobService.getMessageStream(
              JobApi.JobMessagesRequest.newBuilder().setJobId(jobId).build());
      while (it.hasNext()) {
        JobMessagesResponse r = it.next();
        if (!r.hasMessageResponse()) {
          continue;
        }
        JobMessage m = r.getMessageResponse();
        if (m.getImportance() == JobMessage.MessageImportance.JOB_MESSAGE_ERROR) {
          errors.add(m.getMessageText());
          LOG.error("[{}] {}", jobId, m.getMessageText());
        } else if (m.getImportance() == JobMessage.MessageImportance.JOB_MESSAGE_WARNING) {
          LOG.warn("[{}] {}", jobId, m.getMessageText());
        } else {
          LOG.info("[{}] {}", jobId, m.getMessageText());
        }
      }
    } catch (StatusRuntimeException e) {
      LOG.debug("Message stream of {} ended: {}", jobId, e.getStatus());
    }
  }

  static State toJava(JobApi.JobState.Enum state) {
    switch (state) {
      case STOPPED:
        return State.STOPPED;
      case STARTING:
      case RUNNING:
      case CANCELLING: // still running until the server says CANCELLED
      case DRAINING:
        return State.RUNNING;
      case DONE:
      case DRAINED: // a drained job ended with everything committed
        return State.DONE;
      case FAILED:
        return State.FAILED;
      case CANCELLED:
        return State.CANCELLED;
      case UPDATED:
        return State.UPDATED;
      default:
        return State.UNKNOWN;
    }
  }

  private static Thread daemon(String name, Runnable body) {
    Thread t = new Thread(body, name);
    t.setDaemon(true);
    return t;
  }

  private static void sleep(long millis) {
    try {
      Thread.sleep(millis);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    }
  }

  @Override
  public String toString() {
    return "BeamKafkaPipelineResult{" + jobId + ", " + lastState + "}";
  }
}
