# Experiments with an `evaluate` section (ZFB): every trained shard and the baselines under
# shift, a job per shard after its training. The evaluate section is not part of a run's id but
# of the stamp evaluate.json (common.smk): adding a shift or a test length reruns these jobs and
# never the training. Like training jobs they take one thread each where there are several, so two
# run side by side: two threads made one evaluation 1.1x faster (2026-11-26, a zfb_fixed block
# shard, 7.1 s against 6.5 s), while two at once on two cores do twice the work.
rule evaluate:
    input:
        plan=ancient("results/{exp}/plan.json"),
        trained="results/{exp}/shards/{shard}.npz",
        spec="results/{exp}/stamps/evaluate.json",
    output:
        "results/{exp}/shards/{shard}.shift.parquet",
    threads: lambda w: train_threads(w.exp),   # as training: one thread each where an experiment has several
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
