"""The task runtime: what every task of every engine runs (:mod:`.runtime`), what it writes (:mod:`.output`), the
device a GPU path gets (:mod:`.device`) and the progress it reports (:mod:`.progress`)."""
