"""Sealing: the campaign's inputs hashed into `seal.json` before the first decision draw, and a folder
sealed for other inputs refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from badc_check.campaign.spec import Campaign, CampaignError
from badc_trace.files import write_atomic


def check_seal(campaign: Campaign, out: Path) -> dict[str, Any]:
    """Write the seal, or refuse when an existing one in `out` was made from other inputs."""
    seal = campaign.seal()
    path = out / "seal.json"
    if path.exists():
        old = json.loads(path.read_text())
        if old.get("seal") != seal["seal"]:
            changed = [k for k in seal["parts"] if k != "configs" and old["parts"].get(k) != seal["parts"][k]]
            changed += [f"config {cid}" for cid, hv in seal["parts"]["configs"].items()
                        if old["parts"].get("configs", {}).get(cid) != hv]
            changed += [f"config {cid} (removed)" for cid in old["parts"].get("configs", {})
                        if cid not in seal["parts"]["configs"]]
            raise CampaignError(f"{out} is sealed for other inputs; changed: {', '.join(changed) or 'unknown'}. "
                                "Use a new --out folder.")
        # The shard size is no decision input, but shards are named by their first draw: finished shards
        # of another size would overlap the new ones, and their draws would count twice.
        if old.get("shard", campaign.shard) != campaign.shard:
            raise CampaignError(f"{out}: its finished shards hold {old['shard']:,} draws each, the campaign file now "
                                f"says shard = {campaign.shard:,}; set it back or use a new --out folder.")
        exact = campaign.exact_seal()
        if exact is not None and old.get("exact", exact) != exact:
            raise CampaignError(f"{out} is sealed with another exact channel tolerance or soundness pass "
                                "([campaign] exact_tol, exact_soundness); set them back or use a new --out folder.")
        if exact is not None and "exact" not in old:  # the channel added to a sealed folder: its own seal
            write_json(path, {**old, "exact": exact})
    else:
        exact = campaign.exact_seal()
        write_json(path, {**seal, "shard": campaign.shard, **({"exact": exact} if exact else {})})
    return seal


def write_json(path: Path, obj: Any) -> None:
    write_atomic(path, json.dumps(obj, indent=1))
