import mimetypes

# `snakemake --report report.zip` (after a run): one category per experiment with its HTML report
# and its small tables; runs is flagged here, as an input, as its own rule lives elsewhere.
# index.html stays out: its links to the reports do not resolve inside the zip.
report: "../report/workflow.rst"

mimetypes.add_type("application/vnd.apache.parquet", ".parquet")   # else listed as text/plain


# Reads and draws only: every file it reads is an input here, the timing table's benchmark
# files included (common.smk: benchmark_files), so Snakemake knows when a report is stale.
rule report:
    input:
        plan="results/{exp}/plan.json",
        tables=expand("results/{{exp}}/{t}.parquet", t=["curves", "attention", "matrices", "llc", "summary", "theory",
                                                      "theory_curves", "shift", "slopes", "stability", "clock", "collapse",
                                                      "verdicts"]),
        runs=report("results/{exp}/runs.parquet", caption="../report/runs.rst", category="{exp}",
                    subcategory="tables", labels={"table": "runs"}),
        shards="results/{exp}/shards.json",
        benchmarks=lambda w: benchmark_files(w.exp),
        paper=lambda w: paper_config(w.exp),            # the paper's sizes the headline quotes, where it has them
    output:
        html=report("reports/{exp}.html", caption="../report/experiment.rst", category="{exp}",
                    subcategory="report", labels={"file": "{exp}.html"}),
        thumbnail="results/{exp}/thumbnail.png",        # the key figure, for the index
        headline="results/{exp}/headline.json",         # what the headline says of each model, for the index
    threads: 2                                          # its figures are drawn two at a time
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/report.tsv"
    log:
        "logs/{exp}/report.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl report --plan {input.plan} --results results/{wildcards.exp} "
        "--out {output.html} --processes {threads} --benchmarks {input.benchmarks} --paper {input.paper} 2> {log}"


# The landing page: per experiment its verdict counts, key figure, runs, training time and device.
rule index:
    input:
        expand("reports/{exp}.html", exp=EXPERIMENTS),
        expand("results/{exp}/{f}", exp=EXPERIMENTS, f=["verdicts.parquet", "thumbnail.png", "summary.parquet",
                                                     "headline.json"]),
    output:
        "reports/index.html",
    params:
        experiments=lambda w: shlex.quote(json.dumps(
            {n: {"description": e.get("description", "")} for n, e in CFG["experiments"].items()})),
    log:
        "logs/index.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl index --experiments {params.experiments} --results results --out {output} 2> {log}"
