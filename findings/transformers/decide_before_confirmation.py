"""Decide one config of campaign-200000 from its finished on and off arms while its repair-confirmation
arms are still running: the same laws, shards, m and decision rule as the campaign report, without the
repair result (the report lists the config only once every arm is done). Used as

    .venv/bin/python findings/transformers/decide_before_confirmation.py HF24-6
"""

import sys
from pathlib import Path

from badc_check.campaign import decide_from_folder, discovery_jobs, load_campaign

OUT = Path(__file__).parent / "campaign-200000"
CAMPAIGN = Path(__file__).parents[2] / "campaigns" / "transformers.toml"


def main(cid: str) -> None:
    campaign = load_campaign(CAMPAIGN, draws=200_000, confirm_draws=400_000)
    config = next((c for c in campaign.configs if c["id"] == cid), None)
    if config is None:
        sys.exit(f"{cid}: not a config of {CAMPAIGN}")
    jobs = discovery_jobs(campaign, config)
    missing = [j.label for j in jobs if not j.output(OUT).exists()]
    if missing:
        sys.exit(f"{cid}: {len(missing)} on/off job(s) not done in {OUT} (first: {missing[0]})")
    m = campaign.m
    d = decide_from_folder(config, jobs, OUT, campaign, m).decision.to_dict()
    print(f"{cid}: {d['decision']}, {'eligible' if d['eligible'] else 'not eligible'} (m = {m}, "
          "repair confirmation not included)")
    print(f"  D {d['D']:.4f} (returned outputs), crash-free {d['D_crash_free']:.4f}, "
          f"crashes {d['crashes']}")
    print(f"  exercise {d['exercise']}, calibration {d['calibration']}")
    print(f"  hypothesis {d['hypothesis']}")
    c = d.get("contract")
    if c:  # a config whose arms replayed no calls has none
        print(f"  contract {c['status']}: {c['violations']:,} violating calls of {c['calls']:,}, "
              f"in {c['violating_requests']:,} of {c['requests']:,} requests")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
