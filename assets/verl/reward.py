"""Shaped GSM8K reward for verl's `reward.custom_reward_function` (path = this file, name = compute_score).

A randomly initialised model never produces a correct GSM8K answer, so verl's built-in GSM8K rule
(1.0 for `#### <right number>`, else 0) gives an all-zero reward, zero GRPO advantages and no real
update. This adds a small dense term so the policy gradient is non-zero from step 1:

    score = 1.0   if the last `#### <number>` equals the ground truth (verl's strict GSM8K rule)
          + 0.1   if the response contains `####` at all
          + 0.2 * (fraction of response characters that are digits)

Plain Python, no verl import, so it also works when loaded from outside verl's tree.
"""

import re

_CLIP = 300  # like verl: only look at the tail of long responses


def _strict_answer(text):
    found = re.findall(r"#### (\-?[0-9\.\,]+)", text[-_CLIP:])
    return found[-1].replace(",", "").replace("$", "") if found else None


def compute_score(data_source=None, solution_str="", ground_truth="", extra_info=None, **kwargs):
    text = solution_str or ""
    score = 1.0 if _strict_answer(text) == str(ground_truth).replace(",", "") else 0.0
    if "####" in text:
        score += 0.1
    if text:
        score += 0.2 * sum(c.isdigit() for c in text) / len(text)
    return float(score)
