# One job per shard: all runs of the shard train together as one vectorized ensemble. The job
# picks its device itself (CUDA when visible, else CPU) and uses `threads` CPU threads. It writes
# the prompt files its runs need first, where missing (results/{exp}/prompts/, shared by every
# shard trained on the same data): one process for all of them instead of a job per dataset.
# plan.json is `ancient`: a shard's name is a hash of its runs, so extending a sweep adds new
# shards and leaves finished ones alone instead of retraining everything.
rule train:
    input:
        plan=ancient("results/{exp}/plan.json"),
        code="results/{exp}/stamps/code.json",
    output:
        "results/{exp}/shards/{shard}.npz",
    threads: lambda w: train_threads(w.exp),
    priority: lambda w: train_priority(w.exp, w.shard)    # longest first, all above theory's 0
    resources:
        # a retry (the SLURM profile's `retries`) asks for twice the estimate: the kernel may have killed the
        # job for memory (its log says so). Not more: most retries follow a time limit or a preemption
        mem_mb=lambda w, attempt: shard_mem_mb(w.exp, w.shard) * min(attempt, 2),
    benchmark:
        "logs/{exp}/benchmark/train/{shard}.tsv"
    log:
        "logs/{exp}/train/{shard}.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl train --plan {input.plan} --shard {wildcards.shard} "
        "--prompts-dir results/{wildcards.exp}/prompts --code-stamp {input.code} --out {output} --threads {threads} 2> {log}"
