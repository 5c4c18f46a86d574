# summary.parquet and shift.parquet are small (one row per run / per predictor x shift x length) and
# go into `snakemake --report report.zip`; curves, attention and matrices can hold millions of rows
# and stay out of it.
rule tables:
    input:
        runs="results/{exp}/runs.parquet",
        shards=lambda w: expand("results/{exp}/shards/{s}.npz", exp=w.exp, s=shard_names(w.exp)),
        shift=lambda w: shift_files(w.exp),
    output:
        expand("results/{{exp}}/{t}.parquet", t=["curves", "attention", "matrices", "llc"]),
        report("results/{exp}/summary.parquet", caption="../report/summary.rst", category="{exp}",
               subcategory="tables", labels={"table": "summary"}),
        report("results/{exp}/shift.parquet", caption="../report/shift.rst", category="{exp}",
               subcategory="tables", labels={"table": "shift"}),
        "results/{exp}/shards.json",
    threads: 2                  # the summaries (a phase fit per curve) are made beside the writing
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/tables.tsv"
    log:
        "logs/{exp}/tables.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl tables --runs {input.runs} --outdir results/{wildcards.exp} --shift {input.shift} --processes {threads} -- {input.shards} 2> {log}"
