"""Generation: the IR (`spec`), the op registry (`registry`, `ops`), Hypothesis strategies
(`strategies`), input recipes (`recipes`) and building a spec into torch (`build`)."""
