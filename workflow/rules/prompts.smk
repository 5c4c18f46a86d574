rule prompts:
    input:
        plan=ancient("results/{exp}/plan.json"),
        code="results/{exp}/stamps/code.json",
    output:
        "results/{exp}/prompts/{data_id}.npz",
    benchmark:
        "logs/{exp}/benchmark/prompts/{data_id}.tsv"
    log:
        "logs/{exp}/prompts/{data_id}.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl prompts --plan {input.plan} --data-id {wildcards.data_id} --out {output} 2> {log}"
