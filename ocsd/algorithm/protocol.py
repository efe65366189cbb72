"""The paper's OCSD hyperparameters, written once: every default of the suite that means "the paper's value" reads
them from here. Plain numbers, no imports, so that configs and figures can use them without loading torch."""

__all__ = ["PAPER_RHO", "PAPER_BETA"]

PAPER_RHO = 0.2
"""Step selection ratio rho of every OCSD run of the paper: "we use a step selection ratio of rho=0.2 and an advantage
modulation coefficient of beta=0.5 across all benchmarks and model scales" (appendix, training details; the main
text's experimental setup says the same)."""

PAPER_BETA = 0.5
"""Advantage modulation coefficient beta of every OCSD run of the paper (see :data:`PAPER_RHO`)."""
