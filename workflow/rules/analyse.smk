# Slopes, stability and every claim's verdict, from the tables alone (icl.analyse.verdicts); the report
# only reads and draws them. `icl analyse results/<experiment>` does the same by hand.
rule analyse:
    input:
        plan="results/{exp}/plan.json",
        tables=expand("results/{{exp}}/{t}.parquet", t=["runs", "curves", "matrices", "summary", "theory",
                                                      "theory_curves", "shift"]),
    output:
        verdicts="results/{exp}/verdicts.parquet",      # the verdict rows as data (icl.load: exp.verdicts)
        slopes=report("results/{exp}/slopes.parquet", caption="../report/slopes.rst", category="{exp}",
                      subcategory="tables", labels={"table": "slopes"}),
        stability=report("results/{exp}/stability.parquet", caption="../report/stability.rst",
                         category="{exp}", subcategory="tables", labels={"table": "stability"}),
        clock="results/{exp}/clock.parquet",            # each softmax_q run's time on the collapse clock
        collapse="results/{exp}/collapse.parquet",      # how far the runs on one clock sit apart in rescaled time
    params:
        code=code_trigger(),
    benchmark:
        "logs/{exp}/benchmark/analyse.tsv"
    log:
        "logs/{exp}/analyse.log",
    conda:
        "../envs/icl.yaml"
    shell:
        "OMP_NUM_THREADS={threads} python -m icl analyse results/{wildcards.exp} 2> {log}"
