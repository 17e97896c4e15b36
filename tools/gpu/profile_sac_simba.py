"""Where the GPU time of a SAC+SimBa update goes: the plan's networks (benchmarks/sac-simba-dmc.toml) for MEMBERS
seeds on dmc:walker-walk, eager, 400 random steps then TOTAL_STEPS − 400 acting steps of 2 updates each, under
torch.profiler. On the GPU machine, after tools/gpu/stage_dmc.sh here and with PYTHONPATH as sac_simba_dmc.sh sets it:

    python3 tools/gpu/profile_sac_simba.py $OUT/profile.txt cuda 10 600     # OUT_FILE DEVICE MEMBERS TOTAL_STEPS

OUT_FILE gets two tables: kernels and operators by their own GPU time, then by their own CPU time."""

import sys
import tomllib

from torch.profiler import ProfilerActivity, profile

from agents import sac_simba
from cleanrl_plus.config import parse_args

out, device, members, total = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
plan = tomllib.load(open("benchmarks/sac-simba-dmc.toml", "rb"))
flags = plan["flags"].split() + plan["config"]["simba"].split()
flags += f"--total-timesteps {total} --learning-starts 400 --eval-every 100000 --checkpoint-every 1000000".split()
seeds = [str(seed) for seed in range(1, members + 1)]
where = ["--env-id", "dmc:walker-walk", "--seeds", *seeds, "--device", device, "--runs-dir", "/tmp/profile-runs"]
args = parse_args(sac_simba.Args, where + flags)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    sac_simba.main(args)
events = prof.key_averages()
with open(out, "w") as f:
    f.write(events.table(sort_by="self_cuda_time_total", row_limit=30, max_name_column_width=60))
    f.write("\n\n" + events.table(sort_by="self_cpu_time_total", row_limit=20, max_name_column_width=60))
