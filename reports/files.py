"""A bucket's folder: `spec.json`, `case.json`, `verdict.json` and `repro.py`.

Invariant: the folder is written whole or not at all (files go to a temporary folder that is
renamed into place), so a killed campaign never leaves half a bucket.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from generators.spec import GraphSpec
from reports.repro import render_repro

if TYPE_CHECKING:
    from fuzzer.buckets import BucketKey
    from fuzzer.config import CompileConfig
    from oracles.verdict import Verdict


def bucket_folder_name(bucket_id: int, key: "BucketKey") -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", f"{key.kind}-{key.signature}").strip("-")[:60]
    return f"{bucket_id:04d}-{slug}"


def write_bucket_folder(
    root: Path,
    *,
    bucket_id: int,
    key: "BucketKey",
    spec: GraphSpec,
    device: str,
    config: "CompileConfig",
    verdict: "Verdict",
    case_id: int | None = None,
    notes: tuple[str, ...] = (),
    timeout_s: int = 600,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = root / bucket_folder_name(bucket_id, key)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root))
    (tmp / "spec.json").write_text(spec.to_json() + "\n")
    (tmp / "case.json").write_text(
        json.dumps(
            {"case_id": case_id, "device": device, "config": config.to_dict(), "bucket": key.to_dict()}, indent=2
        )
        + "\n"
    )
    (tmp / "verdict.json").write_text(json.dumps(verdict.to_dict(), indent=2) + "\n")
    repro = render_repro(spec, device=device, config=config, title=str(key), notes=notes, timeout_s=timeout_s)
    (tmp / "repro.py").write_text(repro)
    os.chmod(tmp / "repro.py", 0o755)
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final
