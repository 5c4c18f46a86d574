# Helpers shared by the rules: what each experiment's plan says, as plain strings and lists.

# `exp` matches only the experiments of the config, so a target naming another one gets
# Snakemake's "no rule to produce" instead of a KeyError from deep inside an input function.
wildcard_constraints:
    exp="|".join(re.escape(e) for e in EXPERIMENTS) or "(?!)",
    shard="[A-Za-z0-9_-]+",
    data_id="[0-9a-f]+",


def code_trigger():
    """Opt-in (rerun_on_code_change): a param that changes with the icl source, so Snakemake's
    params trigger reruns the jobs whose code changed."""
    from icl.provenance import code_hash
    return code_hash() if CFG["rerun_on_code_change"] else "off"


def stamp_value(exp, what):
    """What a stamp file holds: the code trigger, or the experiment's evaluate section."""
    if what == "code":
        return json.dumps(code_trigger())
    return json.dumps(CFG["experiments"][exp].get("evaluate"), sort_keys=True)


def experiment_spec(exp):
    """The validated config of one experiment plus the global settings, quoted for a shell."""
    from icl.plan import experiment_json
    return shlex.quote(experiment_json(CFG, exp))


def shard_names(exp):
    return sorted(shards(PLANS[exp]))


def train_threads(exp):
    """2 threads for an experiment of one shard; 1 where there are several: a training job starts
    in 1-2 s and softmax_q's count form trains 180 runs x 400 epochs in about as long, so two
    one-thread jobs side by side do more than one job with two threads (benchmarks/README.md)."""
    return 2 if len(shard_names(exp)) == 1 else 1


def shard_mem_mb(exp, shard):
    from icl.plan import run_bytes
    members = [r for r in PLANS[exp] if r.shard == shard]
    # the job runs Snakemake twice on a cluster (~170 MB each) besides the training process
    return 1500 + sum(run_bytes(r.spec) for r in members) // 2**20


def eval_mem_mb(exp, shard):
    from icl.plan import eval_bytes
    spec = next(r.spec for r in PLANS[exp] if r.shard == shard)
    n = sum(r.shard == shard for r in PLANS[exp])
    # evaluation works through the shard in chunks that fit memory_budget_mb, at least one run each
    one = eval_bytes(spec)
    return 1500 + max(one, min(n * one, CFG["memory_budget_mb"] * 2**20)) // 2**20


def shift_files(exp):
    """The shards' evaluations under shift, for experiments that have an evaluate section."""
    if not CFG["experiments"][exp].get("evaluate"):
        return []
    return [f"results/{exp}/shards/{s}.shift.parquet" for s in shard_names(exp)]


# Stamps carry a value into the jobs behind plan.json's `ancient` edge (train,
# evaluate). A params trigger on those jobs themselves is lost whenever plan.json is rewritten
# in the same invocation (Snakemake 9 skips the own checks of jobs downstream of a job that
# reruns, and does not cross an ancient edge), so the value lives in a file of its own that is
# rewritten only when the value changes, and the jobs take that file as an ordinary input.
rule stamp:
    output:
        "results/{exp}/stamps/{what}.json",
    params:
        value=lambda w: shlex.quote(stamp_value(w.exp, w.what)),
    wildcard_constraints:
        what="code|evaluate",
    log:
        "logs/{exp}/stamp_{what}.log",
    shell:
        "printf '%s\\n' {params.value} > {output} 2> {log}"


rule plan:
    output:
        runs="results/{exp}/runs.parquet",
        plan="results/{exp}/plan.json",
    params:
        spec=lambda w: experiment_spec(w.exp),
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/plan.tsv"
    log:
        "logs/{exp}/plan.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl plan --experiment {wildcards.exp} --spec {params.spec} "
        "--runs {output.runs} --plan {output.plan} 2> {log}"
