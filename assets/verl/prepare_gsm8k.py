#!/usr/bin/env python3
"""Turn GSM8K-layout parquet (main/{train,test}-*.parquet, columns question/answer) into verl's formats.

    python prepare_gsm8k.py SRC_DIR OUT_DIR

Writes OUT_DIR/rl/{train,test}.parquet (verl RL format, as verl's examples/data_preprocess/gsm8k.py
makes: data_source, prompt, ability, reward_model, extra_info) and OUT_DIR/sft/{train,test}.parquet
(a `messages` column: user question + instruction, assistant answer) for verl.trainer.sft_trainer*.
Needs only pyarrow.
"""

import glob
import os
import re
import sys

import pyarrow as pa
import pyarrow.parquet as pq

INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def ground_truth(answer):
    m = re.search(r"#### (\-?[0-9\.\,]+)", answer)
    return m.group(1).replace(",", "") if m else ""


def main(src, out):
    for split in ("train", "test"):
        rows = []
        for path in sorted(glob.glob(os.path.join(src, "**", f"{split}-*.parquet"), recursive=True)):
            rows.extend(pq.read_table(path).to_pylist())
        rl, sft = [], []
        for i, r in enumerate(rows):
            q = r["question"] + " " + INSTRUCTION
            rl.append(
                {
                    "data_source": "openai/gsm8k",
                    "prompt": [{"role": "user", "content": q}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": ground_truth(r["answer"])},
                    "extra_info": {"split": split, "index": i, "answer": r["answer"], "question": r["question"]},
                }
            )
            sft.append({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": r["answer"]}]})
        for kind, data in (("rl", rl), ("sft", sft)):
            os.makedirs(os.path.join(out, kind), exist_ok=True)
            pq.write_table(pa.Table.from_pylist(data), os.path.join(out, kind, f"{split}.parquet"))
        print(f"{split}: {len(rows)} rows")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
