# The plan of an experiment, and the stamps that carry values into the jobs behind its ancient edge.

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
    priority: lambda w: plan_priority(w.exp)
    log:
        "logs/{exp}/stamp_{what}.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "printf '%s\\n' {params.value} > {output} 2> {log}"


rule plan:
    output:
        runs="results/{exp}/runs.parquet",
        plan="results/{exp}/plan.json",
    params:
        spec=lambda w: experiment_spec(w.exp),
        code=code_trigger(),
        shards=lambda w: shard_assignment(w.exp),     # a newer planner that groups runs otherwise rewrites the plan
    priority: lambda w: plan_priority(w.exp)    # before the training it unlocks, the longest's first
    benchmark:
        "logs/{exp}/benchmark/plan.tsv"
    log:
        "logs/{exp}/plan.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl plan --experiment {wildcards.exp} --spec {params.spec} "
        "--runs {output.runs} --plan {output.plan} 2> {log}"
