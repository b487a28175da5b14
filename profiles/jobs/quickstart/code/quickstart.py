"""The quickstart job: reads the GSM8K dataset argus prepared (as verl would) and reports.

It runs as the Ray job's driver, on a worker node, with the snapshot on PYTHONPATH and
the paths argus resolved in ARGUS_* environment variables.
"""

import os
import socket

import pyarrow.parquet as pq
import ray

import marker


def check(path, split):
    table = pq.read_table(path)
    expected = ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert table.column_names == expected, table.column_names
    rows = table.to_pylist()
    assert all(r["data_source"] == "openai/gsm8k" for r in rows)
    assert all(r["extra_info"]["split"] == split for r in rows)
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
    return rows


@ray.remote(num_gpus=1)
def on_a_gpu(ground_truths):
    """A task on a (simulated) GPU worker: scores the reference answers against themselves."""
    return sum(1 for g in ground_truths if g == g.strip()), socket.gethostname(), ray.get_gpu_ids()


def main():
    train = check(os.environ["ARGUS_TRAIN_FILE"], "train")
    test = check(os.environ["ARGUS_VAL_FILE"], "test")
    print(f"code marker: {marker.MARKER}")
    print(f"driver on: {socket.gethostname()}")
    print(f"train rows: {len(train)}, test rows: {len(test)}")
    print(f"first prompt: {train[0]['prompt'][0]['content'][:80]}...")
    ray.init()
    gpus = ray.cluster_resources().get("GPU", 0)
    correct, host, ids = ray.get(on_a_gpu.remote([r["reward_model"]["ground_truth"] for r in test]))
    print(f"cluster GPUs: {gpus:g}; GPU task on {host} (GPU ids {ids}): {correct}/{len(test)} answers well-formed")
    print("quickstart OK")


if __name__ == "__main__":
    main()
