rule report:
    input:
        plan="results/{exp}/plan.json",
        tables=expand("results/{{exp}}/{t}.parquet", t=["runs", "curves", "attention", "matrices", "summary",
                                                      "theory", "theory_curves", "slopes", "stability", "shift"]),
    output:
        "reports/{exp}.html",
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/report.tsv"
    log:
        "logs/{exp}/report.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl report --plan {input.plan} --results results/{wildcards.exp} --out {output} 2> {log}"


rule index:
    input:
        expand("reports/{exp}.html", exp=EXPERIMENTS),
    output:
        "reports/index.html",
    params:
        experiments=lambda w: shlex.quote(json.dumps(
            {n: {"description": e.get("description", "")} for n, e in CFG["experiments"].items()})),
    log:
        "logs/index.log",
    shell:
        "OMP_NUM_THREADS={threads} {PY} -m icl index --experiments {params.experiments} --out {output} 2> {log}"
