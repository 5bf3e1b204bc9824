"""Beam's own Java examples (beam-examples-java: WordCount and
complete.game.UserScore), unchanged, with --runner=BeamKafkaRunner and only the
runner (java/) added to their classpath: scripts/java-examples.sh, whose
outputs are checked against counts computed in Python."""

import subprocess

from conftest import REPO_ROOT


def test_beams_java_examples_run_unchanged_with_exact_outputs(job_server, broker):
  run = subprocess.run(
      ['bash', str(REPO_ROOT / 'scripts' / 'java-examples.sh'),
       '--endpoint', job_server.endpoint, '--bootstrap-servers', broker],
      capture_output=True, text=True, timeout=1200)
  assert run.returncode == 0, 'java-examples.sh failed:\n%s\njob server:\n%s' % (
      run.stderr[-4000:], job_server.log_text()[-3000:])
  assert run.stdout.strip().splitlines()[-1] == 'java-examples: ok'
