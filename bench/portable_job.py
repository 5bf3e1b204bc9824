"""What every Beam job a benchmark submits through PortableRunner shares:
its submission, how it failed, waiting for it to finish, and cancelling it
when it did not."""

import time


class PortableJob:
  """Expects `self.result` (a PipelineResult), `self.proc` (its runner's
  process, for the log) and `self.ended` (None until `finish`)."""

  def submit(self, pipeline, runner_log):
    """Runs `pipeline`; a refused submission says what `runner_log` (the
    runner process's log, by name) ended with."""
    self.t_start = time.time()
    try:
      self.result = pipeline.run()
    except Exception as e:
      raise RuntimeError('submission failed: %s\n%s %s:\n%s' % (e, runner_log, self.proc.log_path, self.proc.tail()))
    self.ended = None

  def error(self):
    state = str(self.result.state)
    if state in ('FAILED', 'CANCELLED', 'STOPPED', 'UNRECOGNIZED'):
      return 'job ended %s (log %s):\n%s' % (state, self.proc.log_path, self.proc.tail())
    return None

  def finish(self):
    # Every output was seen by now, so the job should end within seconds.
    self.ended = str(self.result.wait_until_finish(duration=60_000))
    if self.ended != 'DONE':
      raise RuntimeError('job not DONE 60 s after its last output: %s' % self.ended)

  def cancel_unless_done(self):
    if self.ended != 'DONE':
      try:
        self.result.cancel()
        self.result.wait_until_finish(duration=30_000)
      except Exception:  # Beam's client raises for CANCELLED
        pass
