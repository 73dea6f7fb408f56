"""`badc run`'s campaign runner, in parts: `spec` (the campaign file, validated), `validate` (engine-native
keys, judged by each build), `seal`, `plan` (jobs), `executors`, `progress`, `merge` (arms and decisions
from a folder), `run` (the whole campaign, in stages: plan, exact, draw, decide, select, confirm, report),
`result` (the report it returns, a frozen `CampaignReport`) and `report` (Markdown)."""

from badc_check.campaign.merge import decide_from_folder, merge_shards
from badc_check.campaign.plan import Job, plan
from badc_check.campaign.report import report_markdown
from badc_check.campaign.result import CampaignReport
from badc_check.campaign.run import RETRIES, run_campaign
from badc_check.campaign.spec import BUILTIN, SHARD, Campaign, CampaignError, installed_only, load_campaign

__all__ = ["BUILTIN", "RETRIES", "SHARD", "Campaign", "CampaignError", "CampaignReport", "Job", "decide_from_folder",
           "installed_only", "load_campaign", "merge_shards", "plan", "report_markdown", "run_campaign"]
