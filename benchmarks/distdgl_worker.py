"""One DistDGL process of bench_distdgl.py (run in DGL 2.1's venv, not gpart's): a server or a trainer.

    DGL_ROLE=server ... python distdgl_worker.py server
    DGL_ROLE=client ... python distdgl_worker.py trainer PART OUT.json GRAPH_NAME FANOUTS BATCH MAX_BATCHES

bench_distdgl.py starts one server and one trainer per partition, each pair
in its own mount namespace with its own /dev/shm (the servers share their
partition with their trainer through shared memory under names that would
collide on one host), and sets the DGL_* variables DGL's launch tool sets.
All servers listen on 127.0.0.1, so DGL would take machine 0 for every
trainer (it picks the first ip_config line with a local address): the
trainer sets its machine id to its partition instead. The trainer iterates
one epoch of DistNodeDataLoader over its share of the training nodes,
fetching the input nodes' features and the seeds' labels, no model, and
writes the sampled edges, seconds and CPU seconds to OUT.json: its own and
its server's (SERVER_PID, read from /proc) over the epoch. One thread per
process.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _server_cpu() -> float:
    """CPU seconds of the pair's server so far (user + system, /proc/SERVER_PID/stat), 0 when unknown."""
    pid = os.environ.get("SERVER_PID")
    if not pid:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    import torch

    torch.set_num_threads(1)
    import dgl
    from dgl.distributed import rpc_client

    role = sys.argv[1]
    if role == "server":
        dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])  # serves until the trainers finish, then exits
        return
    part, out, graph_name = int(sys.argv[2]), sys.argv[3], sys.argv[4]
    fanouts, batch_size, max_batches = [int(f) for f in sys.argv[5].split(",")], int(sys.argv[6]), int(sys.argv[7])
    rpc_client.get_local_machine_id = lambda namebook: part  # every server is on 127.0.0.1: the pair's machine
    dgl.distributed.initialize(os.environ["DGL_IP_CONFIG"])
    torch.distributed.init_process_group("gloo")
    g = dgl.distributed.DistGraph(graph_name, part_config=os.environ["DGL_CONF_PATH"])
    train = dgl.distributed.node_split(g.ndata["train_mask"], g.get_partition_book(), force_even=True)
    # DGL's fanouts are per layer, input layer first: the reverse of the per-hop list
    sampler = dgl.dataloading.NeighborSampler(list(reversed(fanouts)))
    loader = dgl.dataloading.DistNodeDataLoader(g, train, sampler, batch_size=batch_size, shuffle=True, drop_last=False)
    torch.distributed.barrier()
    edges = batches = seeds_done = 0
    start, cpu, server = time.perf_counter(), time.process_time(), _server_cpu()
    for input_nodes, seeds, blocks in loader:
        x = g.ndata["feat"][input_nodes]
        y = g.ndata["label"][seeds]
        edges += sum(int(b.num_edges()) for b in blocks)
        batches += 1
        seeds_done += int(seeds.shape[0])
        assert x.shape[0] == input_nodes.shape[0] and y.shape[0] == seeds.shape[0]
        if batches == max_batches:
            break
    seconds = time.perf_counter() - start
    cpu, server = time.process_time() - cpu, _server_cpu() - server
    torch.distributed.barrier()
    with open(out, "w") as f:
        json.dump({"edges": edges, "batches": batches, "seconds": seconds, "seeds": int(train.numel()), "seeds_done": seeds_done,
                   "cpu": cpu + server}, f)
    dgl.distributed.exit_client()


if __name__ == "__main__":
    main()
