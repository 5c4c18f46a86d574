# The theory branch: predictions for every planned run, independent of training: it reads plan.json
# alone, so a run that resumes or tables that are remade leave it be. Where plan.json is rewritten
# (runs added to the sweep), theory_flows.npz (not an output: Snakemake would delete it first) keeps
# the mean-field flows already integrated, by their inputs' hash, and only the new ones are integrated.
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
        "OMP_NUM_THREADS={threads} python -m icl theory --plan {input.plan} --out {output.theory} --curves {output.curves} "
        "--flows results/{wildcards.exp}/theory_flows.npz 2> {log}"

