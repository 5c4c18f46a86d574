# Experiments with an `evaluate` section (ZFB): every trained shard and the baselines under
# shift, a job per shard after its training. The evaluate section is not part of a run's id but
# of the stamp evaluate.json (common.smk): adding a shift or a test length reruns these jobs and
# never the training.
rule evaluate:
    input:
        plan=ancient("results/{exp}/plan.json"),
        trained="results/{exp}/shards/{shard}.npz",
        spec="results/{exp}/stamps/evaluate.json",
    output:
        "results/{exp}/shards/{shard}.shift.parquet",
    threads: 2
    resources:
        mem_mb=lambda w: eval_mem_mb(w.exp, w.shard),
    benchmark:
        "logs/{exp}/benchmark/evaluate/{shard}.tsv"
    log:
        "logs/{exp}/evaluate/{shard}.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl evaluate --plan {input.plan} --shard {wildcards.shard} "
        "--prompts-dir results/{wildcards.exp}/prompts --trained {input.trained} --out {output} "
        "--evaluate-spec {input.spec} --threads {threads} 2> {log}"
