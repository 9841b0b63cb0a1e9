"""`divfuzz fuzz --replay-known`: before fuzzing, re-run every known bucket's minimal spec in the
new run, so that `divfuzz diff` can call a bucket gone from it "fixed" rather than "not reached".

A bucket's minimal spec is its minimized spec when it has one (what the bucket folder's
`spec.json` holds), else the spec of its first case: `divfuzz.reports.diff` counts a bucket as replayed
when the new side ran either (`BucketState.spec_digests`). Specs are read and validated from the
store before the run starts (`known_specs`), so a spec that does not load is bad input (exit 2,
naming the store and the bucket) and the store is left as it was.

The replays are cases of the run like any other (judged, analysed, stored, counted in the
progress), at slot `REPLAY_SLOT`, indices 0, 1, ... in the order run: a resumed run skips the
specs it already replayed and numbers the rest after them (its known list may have grown). They run one after another in one worker on slot 0's device, before the slots
start, within the budget: past the deadline the rest are left (diff then says "not reached").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from divfuzz.generators.spec import GraphSpec
from divfuzz.generators.validate import validate_spec
from divfuzz.records.errors import DivfuzzError, SpecError
from divfuzz.fuzzer.store import Store
from divfuzz.fuzzer.engine.worker import Worker

# The slot number of replayed cases in the store: apart from the fuzzing slots (0, 1, ...).
REPLAY_SLOT = -1


@dataclass(frozen=True)
class KnownSpec:
    bucket_id: int
    key: str
    where: str  # "minimized spec" or "first case's spec"
    spec: GraphSpec


def known_specs(store_path: Path) -> list[KnownSpec]:
    """Every bucket's minimal spec in the store at `store_path` (none when there is no store yet),
    one per distinct spec, in bucket order. A spec that does not load raises SpecError naming the
    store and the bucket. Reads only."""
    if not Path(store_path).exists():
        return []
    store = Store(store_path, create=False)
    try:
        known: list[KnownSpec] = []
        seen: set[str] = set()
        for b in store.buckets():
            spec_dict = (b.minimized or {}).get("spec")
            where = "minimized spec" if spec_dict is not None else "first case's spec"
            source = f"store {store_path}, bucket {b.id} ({b.key}), {where}"
            try:
                if spec_dict is not None:
                    spec = GraphSpec.from_dict(spec_dict, source=source)
                elif b.first_case_id is not None:
                    spec = GraphSpec.from_json(store.case(b.first_case_id).spec_json, source=source)
                else:
                    raise SpecError(f"{source}: the bucket has no case stored")
                spec = validate_spec(spec, source=source)
            except DivfuzzError as e:  # a store's own error (a damaged row) may name no source
                raise SpecError(f"--replay-known: {e if str(e).startswith(source) else f'{source}: {e}'}") from None
            except (ValueError, KeyError, TypeError, RecursionError) as e:
                raise SpecError(f"--replay-known: {source}: does not load ({type(e).__name__}: {str(e)[:200]})") from None
            if spec.digest() not in seen:
                seen.add(spec.digest())
                known.append(KnownSpec(b.id, str(b.key), where, spec))
        return known
    finally:
        store.close()


def replay_known(campaign, known: list[KnownSpec]) -> int:
    """Run each known spec as a case of `campaign`'s run, before its slots (pass as
    `Campaign.run(before_slots=...)`); returns how many ran or were already stored."""
    where = campaign.slot_devices[0]
    worker = Worker(where.worker_device, extra_env={**campaign.worker_env, **where.env})
    with campaign.lock:
        campaign.slot_workers.append(worker)  # an interrupt aborts it like a slot's
    replayed, idx = set(), 0
    while (stored := campaign.store.stored_case(campaign.run_id, REPLAY_SLOT, idx)) is not None:  # a resumed run's
        replayed.add(stored[0])
        idx += 1
    done = 0
    try:
        for k in known:
            if k.spec.digest() in replayed:
                with campaign.lock:
                    campaign.progress.skipped += 1
                    campaign.progress.replays += 1
                done += 1
                continue
            if campaign.stop.is_set() or campaign.work_end.expired():
                break
            campaign.run_case(k.spec, worker, slot=REPLAY_SLOT, idx=idx)
            with campaign.lock:
                campaign.progress.replays += 1
            idx += 1
            done += 1
    finally:
        worker.stop()
    return done
