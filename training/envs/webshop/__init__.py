"""The offline WebShop (Yao et al., 2022): a generated or real catalogue, its site, reward and batched episodes.

:mod:`~training.envs.webshop.vocab`, :mod:`~training.envs.webshop.catalog`, :mod:`~training.envs.webshop.real`
    Word lists, the generated catalogue and goals, and a catalogue built around WebShop's real goals.
:mod:`~training.envs.webshop.site`, :mod:`~training.envs.webshop.reward`
    The site (search, pages, clickables) and the purchase reward.
:mod:`~training.envs.webshop.env`, :mod:`~training.envs.webshop.http`, :mod:`~training.envs.webshop.server`
    Batched episodes over the built-in site or a WebShop server over HTTP, and a local server with WebShop's routes.
:mod:`~training.envs.webshop.tasks`, :mod:`~training.envs.webshop.runtime`
    Where a run's tasks come from (:class:`~training.envs.webshop.tasks.WebshopSource`), and the runtime the
    registry's ``webshop`` entry names.

``python -m training.envs.webshop {generate,serve,play}``: :mod:`training.envs.webshop.__main__`.
"""
