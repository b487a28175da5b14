"""Generates the quickstart's GSM8K-shaped sample (never downloaded): the hub repo's layout,
question/answer columns, answers ending in `#### <number>`. Deterministic.

    python3 make_sample.py   # needs pyarrow; rewrites main/*.parquet beside this file
"""

import os
import random

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
NAMES = ["Natalia", "Weng", "Betty", "James", "Julie", "Mark", "Albert", "Ken"]
ITEMS = ["clips", "apples", "books", "stamps", "pencils", "marbles"]


def rows(split, n, rng):
    out = []
    for i in range(n):
        name, item = rng.choice(NAMES), rng.choice(ITEMS)
        a, b = rng.randrange(2, 900), rng.randrange(2, 90)
        total = a + b * 3
        question = f"{name} has {a} {item} and gets {b} more each day for 3 days. How many {item} does {name} have?"
        answer = f"{name} gets {b}*3 = <<{b}*3={b * 3}>>{b * 3} {item}.\n{name} has {a}+{b * 3} = <<{a}+{b * 3}={total}>>{total} {item}.\n#### {total:,}"
        out.append((question, answer))
    return out


def main():
    rng = random.Random(2024)
    os.makedirs(os.path.join(HERE, "main"), exist_ok=True)
    for split, n in [("train", 64), ("test", 16)]:
        data = rows(split, n, rng)
        table = pa.table({"question": [q for q, _ in data], "answer": [a for _, a in data]})
        pq.write_table(table, os.path.join(HERE, "main", f"{split}-00000-of-00001.parquet"))


if __name__ == "__main__":
    main()
