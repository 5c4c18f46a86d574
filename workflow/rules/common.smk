# Helpers shared by the rules: what each experiment's plan says, as plain strings and lists.
import os

# `exp` matches only the experiments of the config, so a target naming another one gets
# Snakemake's "no rule to produce" instead of a KeyError from deep inside an input function.
wildcard_constraints:
    exp="|".join(re.escape(e) for e in EXPERIMENTS) or "(?!)",
    shard="[A-Za-z0-9_-]+",
    data_id="[0-9a-f]+",


def code_trigger():
    """Opt-in (rerun_on_code_change): a param that changes with the icl source, so Snakemake's
    params trigger reruns the jobs whose code changed."""
    from icl.jobs.provenance import code_hash
    return code_hash() if CFG["rerun_on_code_change"] else "off"


def stamp_value(exp, what):
    """What a stamp file holds: the code trigger, or the experiment's evaluate section."""
    if what == "code":
        return json.dumps(code_trigger())
    return json.dumps(CFG["experiments"][exp].get("evaluate"), sort_keys=True)


def experiment_spec(exp):
    """The validated config of one experiment plus the global settings, quoted for a shell."""
    from icl.plan.shards import experiment_json
    return shlex.quote(experiment_json(CFG, exp))


def shard_assignment(exp):
    """A hash of which runs train in which shard, as this workflow plans them: where an upgrade of
    icl plans them otherwise (its shards group other runs), the plan rule's params change and
    plan.json is rewritten; without it the train jobs would ask for shards the old plan lacks."""
    from icl.jobs.runtime import stable_hash
    return stable_hash(sorted((r.run_id, r.shard) for r in PLANS[exp]))


def shard_names(exp):
    return sorted(shards(PLANS[exp]))


def train_threads(exp):
    from icl.plan.shards import train_threads
    return train_threads(len(shard_names(exp)))


PRIORITIES = {}


def priorities(exp):
    """Each training job's priority, above 1 by its work (icl.plan.estimate.priorities): on a few
    cores the longest jobs start first and the short ones fill in around them. Once per experiment."""
    if exp not in PRIORITIES:
        from icl.plan.estimate import priorities
        PRIORITIES[exp] = priorities(PLANS[exp])
    return PRIORITIES[exp]


def train_priority(exp, shard):
    return priorities(exp)[shard]


def plan_priority(exp):
    """An experiment's plan and stamps: above its longest training job, which waits on them."""
    return round(1 + max(priorities(exp).values()), 2)


def shard_mem_mb(exp, shard):
    from icl.plan.shards import shard_mem_mb
    return shard_mem_mb([r for r in PLANS[exp] if r.shard == shard])


def eval_mem_mb(exp, shard):
    from icl.plan.shards import JOB_BASE_MB, eval_bytes
    spec = next(r.spec for r in PLANS[exp] if r.shard == shard)
    n = sum(r.shard == shard for r in PLANS[exp])
    # evaluation works through the shard in chunks that fit memory_budget_mb, at least one run each
    one = eval_bytes(spec)
    return JOB_BASE_MB + max(one, min(n * one, CFG["memory_budget_mb"] * 2**20)) // 2**20


def benchmark_files(exp):
    """The Snakemake benchmark files of an experiment's jobs before its report (the report's timing
    table). A job whose output exists but whose benchmark is gone (logs/ deleted) is left out:
    asking for its benchmark would rerun the job, training included."""
    steps = [("plan", f"results/{exp}/plan.json"), ("theory", f"results/{exp}/theory.parquet"),
             ("tables", f"results/{exp}/summary.parquet"), ("analyse", f"results/{exp}/verdicts.parquet")]
    steps += [(f"train/{s}", f"results/{exp}/shards/{s}.npz") for s in shard_names(exp)]
    if CFG["experiments"][exp].get("evaluate"):
        steps += [(f"evaluate/{s}", f"results/{exp}/shards/{s}.shift.parquet") for s in shard_names(exp)]
    out = []
    for step, product in steps:
        bench = f"logs/{exp}/benchmark/{step}.tsv"
        if os.path.exists(bench) or not os.path.exists(product):
            out.append(bench)
    return out


def paper_config(exp):
    """config/paper.yaml beside the Snakefile where it has an experiment of this name (the report's
    headline quotes its sizes), else nothing: a change to it reruns only the reports that read it."""
    path = Path(workflow.basedir) / "config" / "paper.yaml"
    if not path.exists() or exp not in ((yaml.safe_load(path.read_text()) or {}).get("experiments") or {}):
        return []
    return str(path)


def shift_files(exp):
    """The shards' evaluations under shift, for experiments that have an evaluate section."""
    if not CFG["experiments"][exp].get("evaluate"):
        return []
    return [f"results/{exp}/shards/{s}.shift.parquet" for s in shard_names(exp)]
