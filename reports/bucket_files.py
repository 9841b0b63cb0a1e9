"""The names and the place of a bucket's folder: one owner for every file name in it, the store's
`buckets/` folder, and a folder's name from its bucket's id and key.

Invariants: a folder's path is always built from the bucket's id and key (`bucket_folder_path`),
never read from a store row or a file, so a tampered store cannot point a reader anywhere else;
the name is a plain slug (`[A-Za-z0-9-]`, a 4-digit id first). Torch-free and import-light: the
writer (`divfuzz.reports.bucket_folder`), the issue files (`divfuzz.reports.issue_folder`), the
campaign, `merge`, `report`, `recheck` and the scripts take their names from here.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from divfuzz.records.buckets import BucketKey

BUCKETS_DIR = "buckets"  # under a store's folder (`--out`)

SPEC_FILE = "spec.json"  # the graph, replayable (`divfuzz replay`)
CASE_FILE = "case.json"  # the case id, device, config, bucket key and CPU threads it was judged under
VERDICT_FILE = "verdict.json"  # the run's measured verdict
REPRO_FILE = "repro.py"  # divfuzz's own repro (its settings kept)
ISSUE_SCRIPT = "issue.py"  # a bug's plain-torch script, under torch's defaults where they show it
ISSUE_MARKDOWN = "issue.md"  # a bug's report text
COMPILE_LOG = "compile.log"  # what the compiler printed for the case and its analysis
ANALYSIS_FILE = "analysis.json"  # an analysis's summary (minimized spec, culprit, phases)
REPORT_FILE = "report.md"  # an analysis's own words
MINIMIZE_KEY_FILE = "bucket.json"  # `divfuzz minimize SPEC`'s folder: the key it filed the finding under

# The files every written folder holds; the rest are per finding (a bug's issue files, an analysis's).
REQUIRED_FILES = (SPEC_FILE, CASE_FILE, VERDICT_FILE, REPRO_FILE)

UNFINISHED_PREFIX = ".tmp-"  # a bucket folder being written (`divfuzz.reports.bucket_folder.write_bucket_folder`)


def buckets_root(out_dir: Path) -> Path:
    """A store folder's `buckets/` (not checked here: the reader or writer checks it is a plain folder)."""
    return Path(out_dir) / BUCKETS_DIR


def bucket_folder_name(bucket_id: int, key: "BucketKey") -> str:
    """`NNNN-kind-ops`: the bucket's id, then a slug of its kind and ops, at most 65 characters."""
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{key.kind}-{key.ops_text()}").strip("-")[:60]
    return f"{int(bucket_id):04d}-{slug}".rstrip("-")


def bucket_folder_path(out_dir: Path, bucket_id: int, key: "BucketKey") -> Path:
    """Where bucket `bucket_id` (with `key`) has its folder under the store folder `out_dir`."""
    return buckets_root(out_dir) / bucket_folder_name(bucket_id, key)
