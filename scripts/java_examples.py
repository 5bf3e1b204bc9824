"""Inputs for Beam's Java examples (scripts/java-examples.sh) and the outputs
they must give, computed here in plain Python.

  java_examples.py write-inputs DIR   kinglear.txt and gaming.csv, seeded
  java_examples.py check DIR          compares wordcount/counts* and userscore/scores*
"""
import collections
import glob
import os
import random
import re
import sys

WORDS = ['king', 'lear', "fool's", 'Cordelia', 'storm', 'o', 'heath', 'Gloucester', 'é']
USERS = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank']


def kinglear():
  rng = random.Random(7)
  lines = []
  for _ in range(500):
    words = [rng.choice(WORDS) + rng.choice(['', ',', '.', '!', ' ']) for _ in range(rng.randrange(0, 14))]
    lines.append(' '.join(words))
  return '\n'.join(lines) + '\n'


def gaming():
  rng = random.Random(8)
  rows = []
  for i in range(800):
    user = rng.choice(USERS)
    team = 'team' + user[0]
    millis = 1447690000000 + i * 1000
    rows.append('%s,%s,%d,%d,2015-11-16 08:00:00.000' % (user, team, rng.randrange(1, 20), millis))
  rows.append('not,a,valid,row')  # UserScore counts and drops a bad line
  return '\n'.join(rows) + '\n'


def expected_word_counts(text):
  # WordCount splits on anything that is not a letter (ExampleUtils.TOKENIZER_PATTERN).
  words = re.findall(r'[^\W\d_]+', text)
  return sorted('%s: %d' % kv for kv in collections.Counter(words).items())


def expected_scores(csv):
  totals = collections.Counter()
  for line in csv.splitlines():
    parts = line.split(',')
    try:
      totals[parts[0].strip()] += int(parts[2].strip())
    except (IndexError, ValueError):
      continue
  return sorted(_fields('user: %s, total_score: %d' % kv) for kv in totals.items())


def _fields(line):
  """A UserScore line's fields in a fixed order (the example writes them in
  its HashMap's order)."""
  return ', '.join(sorted(line.split(', ')))


def read_lines(pattern):
  lines = []
  for path in glob.glob(pattern):
    with open(path, encoding='utf-8') as f:
      lines.extend(line for line in f.read().splitlines() if line)
  return sorted(lines)


def main(command, directory):
  if command == 'write-inputs':
    with open(os.path.join(directory, 'kinglear.txt'), 'w', encoding='utf-8') as f:
      f.write(kinglear())
    with open(os.path.join(directory, 'gaming.csv'), 'w', encoding='utf-8') as f:
      f.write(gaming())
    return 0
  failed = False
  for name, got, want in [
      ('WordCount', read_lines(os.path.join(directory, 'wordcount', 'counts*')), expected_word_counts(kinglear())),
      ('UserScore', sorted(_fields(l) for l in read_lines(os.path.join(directory, 'userscore', 'scores*'))),
       expected_scores(gaming()))]:
    if got != want:
      failed = True
      print('%s: got %d lines, want %d; first differences: %s' % (
          name, len(got), len(want), sorted(set(got) ^ set(want))[:10]), file=sys.stderr)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1], sys.argv[2]))
