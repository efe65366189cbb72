"""Generate real ALFWorld ``.tw-pddl`` games from the data the alfworld package ships.

A game is built from one of the 120 AI2-THOR floor plans in ``alfworld/gen/layouts``
(``FloorPlanN-objects.json``: object classes in the room; ``FloorPlanN-openable.json``: every
receptacle instance with its id and interaction pose; ``FloorPlanN-layout.npy``: reachable
points), ALFRED's receptacle compatibility (``VAL_RECEPTACLE_OBJECTS``), object affordances
(``VAL_ACTION_OBJECTS``), openable classes (``OPENABLE_CLASS_LIST``), the task types valid per
room (``GOALS_VALID``) and the goal PDDL and text templates of ``alfworld/gen/goal_library.py``.
A seeded :class:`numpy.random.Generator` picks a floor plan, a goal and how many instances of
each object class go into which compatible receptacle. Names are mangled the way the ALFWorld
release does (``Apple|+01.00|+00.90|-02.00`` -> ``Apple_bar__plus_01_dot_00_...``), so
alfworld's ``AlfredDemangler`` shows them as ``apple 1``.

Solvability: fast-downward's uniform-cost search can run for minutes on big rooms, so the
planner runs on a copy of the problem in which only the goal's objects are ``pickupable``; the
resulting walkthrough is then replayed on the full game, which must win. The walkthrough is
stored in the file (``walkthrough`` key, which TextWorld's PDDL engine uses as the game's
walkthrough) with the generation parameters (``generator`` key).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from training.envs.alfworld.engine import (AlfworldDataError, close_engine, load_game, make_engine,
                                           memoized_translation)
from training.envs.alfworld.game import TASK_TYPES, GameSpec, spec_of_file, wins

SPLITS: dict[str, int] = {"train": 0, "valid": 1, "test": 2}
"""Generated splits; the split's index is part of every game's seed, so splits never share one."""

LONG_TASK_TYPES: dict[str, str] = {v: k for k, v in TASK_TYPES.items()}
APPLIANCE: dict[str, str] = {"clean": "SinkBasin", "heat": "Microwave", "cool": "Fridge"}
AFFORDANCE: dict[str, str] = {"clean": "Cleanable", "heat": "Heatable", "cool": "Coolable"}
LAMPS: tuple[str, ...] = ("DeskLamp", "FloorLamp")
LAMP_SURFACES: tuple[str, ...] = ("Desk", "SideTable", "Dresser", "Shelf", "CoffeeTable",
                                  "DiningTable", "CounterTop", "TVStand")
SYNTH_COUNTS: dict[str, int] = {"StoveBurner": 4}
COMMAND_STYLES: tuple[str, ...] = ("put", "move")
_MANGLE = {"-": "_minus_", "|": "_bar_", "+": "_plus_", ".": "_dot_", ",": "_comma_"}


def _alfworld():
    import alfworld
    import alfworld.gen.constants as constants
    import alfworld.gen.goal_library as goals
    from alfworld.gen.utils.py_util import multireplace

    return Path(alfworld.__file__).parent, constants, goals, multireplace


def mangle(name: str) -> str:
    """ALFWorld PDDL name of an AI2-THOR id (``Apple|+01.00`` -> ``Apple_bar__plus_01_dot_00``)."""
    return _alfworld()[3](name, _MANGLE)


def room_of(plan: int) -> str:
    """Room kind of floor plan ``plan`` (AI2-THOR numbering)."""
    return {0: "Kitchen", 2: "LivingRoom", 3: "Bedroom", 4: "Bathroom"}[plan // 100]


def floor_plans() -> list[int]:
    """Numbers of the floor plans shipped with alfworld."""
    base = _alfworld()[0] / "gen" / "layouts"
    return sorted(int(p.name[len("FloorPlan"):].split("-")[0]) for p in base.glob("FloorPlan*-objects.json"))


@dataclass(frozen=True)
class Receptacle:
    rid: str
    rtype: str
    location: str


@lru_cache(maxsize=None)
def _scene(plan: int) -> tuple[tuple[str, ...], tuple[tuple[str, str, tuple], ...], np.ndarray]:
    base = _alfworld()[0] / "gen" / "layouts"
    try:
        objects = json.loads((base / f"FloorPlan{plan}-objects.json").read_text())
        poses = json.loads((base / f"FloorPlan{plan}-openable.json").read_text())
        points = np.load(base / f"FloorPlan{plan}-layout.npy")
    except FileNotFoundError as exc:
        raise AlfworldDataError(f"floor plan {plan} is not shipped with alfworld: {exc}") from None
    recs = []
    for rid, pose in sorted(poses.items()):
        parts = rid.split("|")
        rtype = parts[-1] if len(parts) > 4 else parts[0]
        recs.append((rid, rtype, tuple(pose)))
    return tuple(objects), tuple(recs), points


def _location(x: float, z: float, rot: float, hor: float) -> str:
    return mangle(f"loc|{int(round(x / 0.25))}|{int(round(z / 0.25))}|{int(round(rot / 90)) % 4}|{int(round(hor))}")


def _coord(v: float) -> str:
    return f"{v:+06.2f}"


def synthetic_id(cls: str, x: float, z: float) -> str:
    """The AI2-THOR id of a receptacle of class ``cls`` the floor plan does not place, at ``(x, z)``.

    A basin is a part of its fixture, as in the release (``Sink|-01.19|+00.90|-02.71|SinkBasin``): ALFWorld prints
    a basin by the fixture's name and ``basin``, so an id of the form ``SinkBasin|...`` would print as
    ``sinkbasinbasin 1`` where the release's games print ``sinkbasin 1``.
    """
    where = f"{_coord(x)}|+00.90|{_coord(z)}"
    if cls.endswith("Basin") and len(cls) > len("Basin"):
        return f"{cls[:-len('Basin')]}|{where}|{cls}"
    return f"{cls}|{where}"


def _receptacles(plan: int, rng: np.random.Generator) -> list[Receptacle]:
    """Receptacle instances of a floor plan; classes in the room without ids get synthetic ones."""
    _, constants, _, _ = _alfworld()
    objects, recs, points = _scene(plan)
    out = [Receptacle(mangle(rid), rtype, _location(*pose)) for rid, rtype, pose in recs]
    have = {r.rtype for r in out}
    movable = set(constants.MOVABLE_RECEPTACLES)
    for cls in sorted(set(objects)):
        if cls in constants.VAL_RECEPTACLE_OBJECTS and cls not in movable and cls not in have:
            for _ in range(SYNTH_COUNTS.get(cls, 1)):
                x, z = points[rng.integers(len(points))]
                rid = synthetic_id(cls, x + rng.uniform(-0.4, 0.4), z + rng.uniform(-0.4, 0.4))
                rot = 90 * int(rng.integers(4))
                out.append(Receptacle(mangle(rid), cls, _location(x, z, rot, 30)))
    return out


def _goal_candidates(task_type: str, obj_types: list[str], rtypes: set[str],
                     present: set[str]) -> list[tuple[str, str]]:
    """(object class, receptacle class or lamp class) pairs the task type allows in this room."""
    _, constants, _, _ = _alfworld()
    val = constants.VAL_RECEPTACLE_OBJECTS
    out = []
    for obj in obj_types:
        homes = {r for r in rtypes if obj in val[r]}
        if task_type == "look":
            out += [(obj, lamp) for lamp in LAMPS if lamp in present and homes]
            continue
        if task_type in APPLIANCE:
            if APPLIANCE[task_type] not in rtypes or obj not in constants.VAL_ACTION_OBJECTS[AFFORDANCE[task_type]]:
                continue
        for recep in sorted(homes):
            if task_type in APPLIANCE and recep == APPLIANCE[task_type]:
                continue
            if homes - {recep}:  # somewhere else to start from
                out.append((obj, recep))
    return out


def build_problem(plan: int, task_type: str, rng: np.random.Generator, name: str):
    """Sample one game of ``task_type`` in floor plan ``plan``.

    Returns
    -------
    tuple
        ``(pddl_problem, planning_problem, task_text, params)`` where ``planning_problem`` keeps
        ``pickupable`` only for the goal's object class; ``None`` when the room has no valid goal.
    """
    _, constants, goals, _ = _alfworld()
    val = constants.VAL_RECEPTACLE_OBJECTS
    objects, _, points = _scene(plan)
    present = set(objects)
    recs = _receptacles(plan, rng)
    rtypes = {r.rtype for r in recs}
    placeable = sorted({o for o in present if "Sliced" not in o and o not in rtypes
                        and any(o in val[r] for r in rtypes)})
    cands = _goal_candidates(task_type, placeable, rtypes, present)
    if task_type == "look":
        surfaces = [r for r in recs if r.rtype in LAMP_SURFACES]
        if not surfaces:
            cands = []
    if not cands:
        return None
    obj, second = cands[int(rng.integers(len(cands)))]
    recep, toggle = (None, second) if task_type == "look" else (second, None)
    counts = {o: int(rng.integers(1, 4)) for o in placeable}
    counts[obj] = int(rng.integers(2, 5)) if task_type == "pick2" else int(rng.integers(1, 4))

    inst, facts = [], []  # (mangled id, class, receptacle)
    for cls in placeable:
        homes = [r for r in recs if cls in val[r.rtype] and not (cls == obj and r.rtype == recep)]
        for _ in range(counts[cls]):
            home = homes[int(rng.integers(len(homes)))]
            inst.append((cls, home))
    lamp_classes = [toggle] if toggle else [c for c in LAMPS if c in present]
    surfaces = [r for r in recs if r.rtype in LAMP_SURFACES]
    if surfaces:
        for cls in lamp_classes:
            inst.append((cls, surfaces[int(rng.integers(len(surfaces)))]))
    ids, used = [], set()
    for cls, home in inst:
        while True:
            x, z = points[int(rng.integers(len(points)))]
            rid = mangle(f"{cls}|{_coord(x + rng.uniform(-0.2, 0.2))}|{_coord(rng.uniform(0.1, 1.5))}|"
                         f"{_coord(z + rng.uniform(-0.2, 0.2))}")
            if rid not in used:
                used.add(rid)
                break
        ids.append(rid)
        facts.append(f"(objectType {rid} {cls}Type)")
        facts.append(f"(inReceptacle {rid} {home.rid})")
        facts.append(f"(objectAtLocation {rid} {home.location})")
        for aff, pred in (("Cleanable", "cleanable"), ("Heatable", "heatable"),
                          ("Coolable", "coolable"), ("Toggleable", "toggleable")):
            if cls in constants.VAL_ACTION_OBJECTS[aff]:
                facts.append(f"({pred} {rid})")
        if cls in constants.MOVABLE_RECEPTACLES:
            facts.append(f"(isReceptacleObject {rid})")
    pickup = [f"(pickupable {rid})" for (cls, _), rid in zip(inst, ids) if cls not in LAMPS]
    plan_pickup = [f"(pickupable {rid})" for (cls, _), rid in zip(inst, ids) if cls == obj]
    for r in recs:
        facts.append(f"(receptacleType {r.rid} {r.rtype}Type)")
        facts.append(f"(receptacleAtLocation {r.rid} {r.location})")
        if r.rtype in constants.OPENABLE_CLASS_LIST:
            facts.append(f"(openable {r.rid})")
    obj_classes = sorted({c for c, _ in inst})
    for rt in sorted(rtypes):
        facts += [f"(canContain {rt}Type {o}Type)" for o in obj_classes if o in val[rt]]
    x, z = points[int(rng.integers(len(points)))]
    start = _location(x, z, 90 * int(rng.integers(4)), 30)
    facts.append(f"(atLocation agent1 {start})")
    locations = sorted({r.location for r in recs} | {start})

    long_type = LONG_TASK_TYPES[task_type]
    spec = goals.gdict[long_type]
    fill = {"obj": obj, "recep": recep or "", "toggle": toggle or ""}
    goal = spec["pddl"].replace("#", "-").format(**fill)
    template = spec["templates"][int(rng.integers(len(spec["templates"])))]
    text = template.format(**{k: v.lower() for k, v in fill.items()})
    declared = (["agent1 - agent"] + [f"{c}Type - otype" for c in obj_classes]
                + [f"{t}Type - rtype" for t in sorted(rtypes)] + [f"{i} - object" for i in ids]
                + [f"{r.rid} - receptacle" for r in recs] + [f"{loc} - location" for loc in locations])

    def problem(pick):
        return ("(define (problem " + name + ")\n(:domain alfred)\n(:objects\n"
                + "\n".join(declared) + "\n)\n(:init\n" + "\n".join(facts + pick) + "\n)\n" + goal)

    params = {"floor_plan": plan, "task_type": task_type, "object_target": obj,
              "parent_target": recep, "toggle_target": toggle, "task": text}
    return problem(pickup), problem(plan_pickup), text, params


def game_logic(command_style: str = "put") -> tuple[str, str]:
    """Domain and grammar of generated games.

    ``put`` (default) words placing as the ALFWorld release's ``json_2.1.1`` games do
    (``put X in/on Y``, feedback ``You put the X in/on the Y.``, no ``help`` command); ``move``
    keeps alfworld 0.4.2's shipped domain and grammar (``move X to Y`` and ``help``).
    """
    if command_style not in COMMAND_STYLES:
        raise ValueError(f"command_style must be one of {COMMAND_STYLES}, got {command_style!r}")
    base = _alfworld()[0] / "data"
    domain = (base / "alfred.pddl").read_text()
    grammar = (base / "alfred.twl2").read_text()
    if command_style == "put":
        for old, new in (('template :: "move {o} to {r}";', 'template :: "put {o} in/on {r}";'),
                         ("You move the {o.name} to the {r.name}.", "You put the {o.name} in/on the {r.name}."),
                         ("move (object) to (receptacle):  ", "put (object) in/on (receptacle):")):
            if old not in grammar:
                raise AlfworldDataError(f"alfworld's alfred.twl2 lacks {old!r}; cannot build the "
                                        "'put' command style (use command_style='move')")
            grammar = grammar.replace(old, new)
        # The release's games have no ``help`` command; drop it from domain and grammar.
        domain, n_dom = re.subn(r"\(:action help\b.*?\(checked \?a\)\s*\)\s*\)\s*", "", domain, flags=re.S)
        grammar, n_gram = re.subn(r"action help \{.*?\"\"\";\s*\}\s*", "", grammar, flags=re.S)
        if n_dom != 1 or n_gram != 1:
            raise AlfworldDataError("alfworld's alfred.pddl/alfred.twl2 changed: cannot remove the "
                                    "'help' action for the 'put' command style")
    return domain, grammar


def _plan(data: dict) -> list[str]:
    env = make_engine(walkthrough=True)
    try:
        load_game(env, data, label="planning copy of the generated problem")
        with memoized_translation():
            state = env.reset()
        return list(state.get("extra.walkthrough") or [])
    except KeyError as exc:
        raise AlfworldDataError(f"planner found no plan (KeyError {exc})") from None
    finally:
        close_engine(env)


def generate_game(out_dir: str | os.PathLike, *, seed: int, index: int, split: str = "train",
                  task_type: str | None = None, command_style: str = "put",
                  max_tries: int = 20) -> GameSpec:
    """Generate, check and save one solvable game.

    The game's generator is ``numpy.random.default_rng([SPLITS[split], seed, index, attempt])``;
    attempts whose room has no valid goal or whose goal the planner cannot reach are retried.
    Saved as ``<out_dir>/json_2.1.1/<split>/<task>-<Obj>-None-<Recep>-<plan>/trial_G<seed>_<index>/
    game.tw-pddl``, the release's layout, so :func:`training.envs.alfworld.load_games` reads it.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {tuple(SPLITS)}, got {split!r}")
    kinds = tuple(TASK_TYPES.values())
    task_type = task_type or kinds[index % len(kinds)]
    if task_type not in kinds:
        raise ValueError(f"task_type must be one of {kinds}, got {task_type!r}")
    _, constants, _, _ = _alfworld()
    rooms = constants.GOALS_VALID[LONG_TASK_TYPES[task_type]]
    plans = [p for p in floor_plans() if room_of(p) in rooms]
    domain, grammar = game_logic(command_style)
    errors = []
    for attempt in range(max_tries):
        rng = np.random.default_rng([SPLITS[split], seed, index, attempt])
        plan = plans[int(rng.integers(len(plans)))]
        trial = f"trial_G{seed}_{index:05d}"
        built = build_problem(plan, task_type, rng, f"plan_{trial}")
        if built is None:
            errors.append(f"FloorPlan{plan}: no valid {task_type} goal")
            continue
        problem, planning, text, params = built
        gram = grammar.replace("UNKNOWN GOAL", text)
        try:
            walkthrough = _plan({"pddl_domain": domain, "grammar": gram, "pddl_problem": planning})
        except AlfworldDataError as exc:
            errors.append(f"FloorPlan{plan}: {exc}")
            continue
        folder = (f"{LONG_TASK_TYPES[task_type]}-{params['object_target']}-None-"
                  f"{params['parent_target'] or params['toggle_target']}-{plan}")
        path = Path(out_dir) / "json_2.1.1" / split / folder / trial / "game.tw-pddl"
        data = {"pddl_domain": domain, "grammar": gram, "pddl_problem": problem, "solvable": True,
                "walkthrough": walkthrough,
                "generator": dict(params, split=split, seed=seed, index=index, attempt=attempt,
                                  command_style=command_style)}
        path.parent.mkdir(parents=True, exist_ok=True)
        # a temporary file of this process's own: runs of one seed started together generate the same games
        # into one folder, and each renames its finished copy into place
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(data))
        if wins(tmp, walkthrough):
            os.replace(tmp, path)
            return spec_of_file(path)
        tmp.unlink()
        errors.append(f"FloorPlan{plan}: walkthrough does not win the full game")
    raise AlfworldDataError(f"no solvable {task_type} game for seed {seed}, index {index} after "
                            f"{max_tries} tries: " + "; ".join(errors[-3:]))


def generate_games(out_dir: str | os.PathLike, n: int, *, seed: int = 0, split: str = "train",
                   task_types: tuple[str, ...] | None = None, command_style: str = "put",
                   progress: bool = True) -> list[GameSpec]:
    """Generate ``n`` games cycling through ``task_types`` (default all six), with a progress bar."""
    from tqdm import tqdm

    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    kinds = tuple(task_types or TASK_TYPES.values())
    return [generate_game(out_dir, seed=seed, index=i, split=split, task_type=kinds[i % len(kinds)],
                          command_style=command_style)
            for i in tqdm(range(n), desc=f"generate {split}", disable=not progress)]
