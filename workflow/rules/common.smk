# Helpers shared by the rules: what each experiment's plan says, as plain strings and lists.

wildcard_constraints:
    exp="[A-Za-z0-9][A-Za-z0-9_-]*",
    shard="[A-Za-z0-9_-]+",
    data_id="[0-9a-f]+",


def code_trigger():
    """Opt-in (rerun_on_code_change): a param that changes with the icl source, so Snakemake's
    params trigger reruns the jobs whose code changed."""
    from icl.provenance import code_hash
    return code_hash() if CFG["rerun_on_code_change"] else "off"


def experiment_spec(exp):
    """The validated config of one experiment plus the global settings, quoted for a shell."""
    settings = {k: v for k, v in CFG.items() if k != "experiments"}
    return shlex.quote(json.dumps({**settings, "experiments": {exp: CFG["experiments"][exp]}}, sort_keys=True))


def shard_names(exp):
    return sorted(shards(PLANS[exp]))


def shard_data(exp, shard):
    return sorted({r.data_id for r in PLANS[exp] if r.shard == shard})


def data_ids(exp):
    return sorted({r.data_id for r in PLANS[exp]})


def shard_mem_mb(exp, shard):
    from icl.plan import run_bytes
    members = [r for r in PLANS[exp] if r.shard == shard]
    # the job runs Snakemake twice on a cluster (~170 MB each) besides the training process
    return 1500 + sum(run_bytes(r.spec) for r in members) // 2**20


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
