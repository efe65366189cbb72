"""The replay machinery: everything that turns an interaction step into replay log-probs.

- :mod:`ocsd.replay.prompts`: chat rendering of interaction prompts into token ids;
- :mod:`ocsd.replay.schemas`: action schemas g(a);
- :mod:`ocsd.replay.views`: replay views (Full, Observation-Ablated, swap, user-defined);
- :mod:`ocsd.replay.render`: rendering many steps' views under a prompt-length limit;
- :mod:`ocsd.replay.scoring`: the teacher-forced scorer and its engines;
- :mod:`ocsd.replay.models`: offline model and tokenizer loading.
"""
