import mimetypes

# `snakemake --report report.zip` (after a run): one category per experiment with its HTML report
# and its small tables; runs is flagged here, as an input, as its own rule lives elsewhere.
# index.html stays out: its links to the reports do not resolve inside the zip.
report: "../report/workflow.rst"

mimetypes.add_type("application/vnd.apache.parquet", ".parquet")   # else listed as text/plain


rule report:
    input:
        plan="results/{exp}/plan.json",
        tables=expand("results/{{exp}}/{t}.parquet", t=["curves", "attention", "matrices", "summary",
                                                      "theory", "theory_curves", "shift"]),
        runs=report("results/{exp}/runs.parquet", caption="../report/runs.rst", category="{exp}",
                    subcategory="tables", labels={"table": "runs"}),
    output:
        html=report("reports/{exp}.html", caption="../report/experiment.rst", category="{exp}",
                    subcategory="report", labels={"file": "{exp}.html"}),
        # measurements across runs (icl.fits), made here: the report reads every table they need
        slopes=report("results/{exp}/slopes.parquet", caption="../report/slopes.rst", category="{exp}",
                      subcategory="tables", labels={"table": "slopes"}),
        stability=report("results/{exp}/stability.parquet", caption="../report/stability.rst",
                         category="{exp}", subcategory="tables", labels={"table": "stability"}),
        verdicts="results/{exp}/verdicts.parquet",      # the verdict rows as data (icl.load: exp.verdicts)
        thumbnail="results/{exp}/thumbnail.png",        # the key figure, for the index
    threads: 2                                          # its figures are drawn two at a time
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/report.tsv"
    log:
        "logs/{exp}/report.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl report --plan {input.plan} --results results/{wildcards.exp} --out {output.html} --processes {threads} 2> {log}"


# The landing page: per experiment its verdict counts, key figure, runs, training time and device.
rule index:
    input:
        expand("reports/{exp}.html", exp=EXPERIMENTS),
        expand("results/{exp}/{f}", exp=EXPERIMENTS, f=["verdicts.parquet", "thumbnail.png", "summary.parquet"]),
    output:
        "reports/index.html",
    params:
        experiments=lambda w: shlex.quote(json.dumps(
            {n: {"description": e.get("description", "")} for n, e in CFG["experiments"].items()})),
    log:
        "logs/index.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl index --experiments {params.experiments} --results results --out {output} 2> {log}"
