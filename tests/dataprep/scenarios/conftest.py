"""Black-box scenarios: ``dataprep`` driven the way a user breaks it, through the CLI only.

Every test goes through ``dataprep.cli.main([...])`` (in process, the ``cli`` fixture) or
``python -m dataprep.cli`` in a subprocess (to kill it with SIGKILL), and reads only what a user
or a peer reads: the exit code, stdout/stderr, ``manifest.json``, ``rejects.jsonl`` and the shards
(``tarfile``, ``webdataset``, ``pyarrow.parquet``). No dataprep internals are imported.

The promises checked (dataprep/README.md, issue 12):

- every input ends in exactly one shard or in the rejects report (count and identity: each input's
  source, and row for tables and lines, appears once, and the manifest's totals agree);
- a run killed with SIGKILL at any point and started again with the same arguments ends
  byte-identical to an uninterrupted run;
- nothing outside OUT is touched, and ``--overwrite`` never removes a file dataprep did not write;
- bad input or a bad command gives a clear message naming the file or option, and a non-zero exit;
- nothing half-written looks complete: a failed or refused run leaves no manifest that
  ``dataprep verify`` calls OK over wrong output.

One file per section, in order: 1. --overwrite and where OUT is; 2. reruns with other options (and
the reject budget); 3. SIGKILL / signals and resume, damaged state; 4. RAW or OUT changed in between,
concurrent runs; 5. stray files, odd names, symlinks, image modes; 6. tables and text; 7. nothing
kept; 8. verify, index and option errors; 9. determinism (twice, --workers, ranges). Tests that start
subprocesses to kill them are marked ``slow`` (1-4 s each); the rest take well under a second.

Where a promise allows two behaviours (refuse with a message, or produce the correct output), the test
accepts either and checks the one that happened completely.
"""

from __future__ import annotations

# The ``cli`` fixture is tests/dataprep/conftest.py's (the token tests use it too).
