# The theory branch: predictions for every planned run, independent of training.
rule theory:
    input:
        plan="results/{exp}/plan.json",
    output:
        theory="results/{exp}/theory.parquet",
        curves="results/{exp}/theory_curves.parquet",
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/theory.tsv"
    log:
        "logs/{exp}/theory.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl theory --plan {input.plan} --out {output.theory} --curves {output.curves} 2> {log}"

