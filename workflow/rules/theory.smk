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
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl theory --plan {input.plan} --out {output.theory} --curves {output.curves} 2> {log}"


# Measurements across runs: convergence-time slopes with bootstrap intervals, stability classes.
rule analysis:
    input:
        runs="results/{exp}/runs.parquet",
        summary="results/{exp}/summary.parquet",
        theory="results/{exp}/theory.parquet",
    output:
        slopes="results/{exp}/slopes.parquet",
        stability="results/{exp}/stability.parquet",
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/analysis.tsv"
    log:
        "logs/{exp}/analysis.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl analysis --results results/{wildcards.exp} 2> {log}"
