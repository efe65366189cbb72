"""A searching expert for ALFWorld: it looks through receptacles in a plausible order until it finds what it needs.

The planner's walkthrough (:mod:`training.envs.alfworld.expert`) knows where every object is and never
searches; a policy at test time does not know and has to. :class:`SearchExpert` plays a game as an agent would,
from what the game shows it: the task text, the receptacles listed in the first observation, and the feedback of
each action. For each object the task needs (and the lamp of a look task) it goes to receptacles in the order of
:func:`search_order` -- a small commonsense table of where each object class tends to be (:data:`PRIORS`), then
the other receptacle classes that can hold it (ALFRED's compatibility table) -- opening closed ones to look
inside, until the object is in view; then it finishes the task as the walkthrough would (take, clean/heat/cool,
put, or switch the lamp on). Ties (the instances of a class, the classes outside the table) are broken by a
seeded :class:`numpy.random.Generator` (:func:`search_expert`: the game's name and a seed).

Not privileged: the order of the receptacles is drawn once, at the first observation, from the task text, the
listed receptacles and the generator, never from where the object is; the expert learns where things are only
from the feedback it reads (``On the countertop 1, you see a mug 2, ...``), and goes back to what it saw earlier.
Every step comes with a templated reason (``The task needs a mug. A mug is often in a cabinet; I have not looked
in cabinet 3 yet, so I go there.``).

:func:`search_expert` is the ``search`` expert of ALFWorld's runtime (:mod:`training.envs.alfworld.runtime`),
answering each observation of a demonstration rollout (:mod:`training.warm_start.demonstrations`);
:func:`search_play` plays it on a private game, and :func:`search_summary` measures it over many games.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Iterator, Sequence

import numpy as np

from ocsd.environments.alfworld import ALFWORLD
from training.envs.alfworld.expert import PAST, item_class
from training.envs.alfworld.game import GameSpec
from training.envs.alfworld.gen import APPLIANCE

__all__ = ["PRIORS", "SearchExpert", "SearchPlay", "TaskGoal", "parse_task", "receptacle_class", "search_expert",
           "search_order", "search_play", "search_summary"]

Step = tuple[str, str]

_FOOD = ("fridge", "countertop", "diningtable", "sinkbasin", "microwave")
_CUTLERY = ("drawer", "countertop", "diningtable", "sinkbasin")
_DISHES = ("cabinet", "countertop", "diningtable", "sinkbasin", "shelf")
_COOKWARE = ("stoveburner", "cabinet", "countertop", "sinkbasin")
_SHAKERS = ("countertop", "cabinet", "diningtable", "shelf", "drawer")
_POCKET = ("desk", "dresser", "sidetable", "drawer", "coffeetable", "diningtable", "shelf")
_BATHROOM = ("countertop", "toilet", "cabinet", "shelf", "sinkbasin", "bathtubbasin")
_DECOR = ("shelf", "coffeetable", "sidetable", "dresser", "diningtable", "desk")
_LAMP = ("desk", "sidetable", "dresser", "shelf", "coffeetable", "diningtable", "countertop", "tvstand")

PRIORS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("apple", "tomato", "potato", "lettuce", "egg", "bread"), _FOOD),
    **dict.fromkeys(("fork", "spoon", "knife", "butterknife", "spatula", "ladle"), _CUTLERY),
    **dict.fromkeys(("bowl", "plate", "cup"), _DISHES),
    "mug": ("cabinet", "coffeemachine", "countertop", "diningtable", "sinkbasin", "shelf"),
    **dict.fromkeys(("pan", "pot", "kettle"), _COOKWARE),
    **dict.fromkeys(("saltshaker", "peppershaker"), _SHAKERS),
    **dict.fromkeys(("winebottle", "glassbottle"), ("fridge", "countertop", "diningtable", "cabinet", "shelf")),
    "dishsponge": ("sinkbasin", "countertop", "cabinet", "drawer"),
    **dict.fromkeys(("soapbar", "soapbottle", "spraybottle"), _BATHROOM),
    "candle": ("toilet", "countertop", "shelf", "cabinet", "drawer"),
    "cloth": ("countertop", "cabinet", "drawer", "bathtubbasin", "sinkbasin", "toilet"),
    "handtowel": ("handtowelholder", "countertop", "cabinet", "drawer"),
    "towel": ("towelholder",),
    "toiletpaper": ("toiletpaperhanger", "toilet", "cabinet", "countertop", "shelf", "drawer"),
    "plunger": ("cabinet", "cart"),
    "tissuebox": ("sidetable", "dresser", "toilet", "shelf", "coffeetable", "desk"),
    "cellphone": ("desk", "dresser", "bed", "sidetable", "drawer", "sofa", "coffeetable"),
    **dict.fromkeys(("creditcard", "keychain"), _POCKET),
    **dict.fromkeys(("pen", "pencil"), ("desk", "drawer", "sidetable", "dresser", "shelf", "diningtable")),
    "cd": ("desk", "drawer", "shelf", "sidetable", "dresser", "safe"),
    "watch": ("dresser", "sidetable", "desk", "drawer", "safe", "shelf"),
    "alarmclock": ("desk", "sidetable", "dresser", "shelf"),
    "remotecontrol": ("coffeetable", "sofa", "armchair", "sidetable", "dresser", "ottoman"),
    "book": ("desk", "bed", "shelf", "sidetable", "coffeetable", "sofa"),
    "laptop": ("desk", "bed", "sofa", "coffeetable", "diningtable", "armchair"),
    "newspaper": ("coffeetable", "sofa", "diningtable", "armchair", "sidetable", "ottoman"),
    "pillow": ("bed", "sofa", "armchair", "ottoman"),
    **dict.fromkeys(("baseballbat", "tennisracket", "basketball"), ("bed", "desk", "dresser", "sidetable")),
    **dict.fromkeys(("vase", "statue", "box"), _DECOR),
    "wateringcan": ("shelf", "countertop", "diningtable", "sidetable"),
    **dict.fromkeys(("desklamp", "floorlamp"), _LAMP),
}
"""Object class -> receptacle classes where it is often found, the likeliest first (a commonsense table)."""

_INSIDE = frozenset({"cabinet", "drawer", "fridge", "microwave", "garbagecan", "safe", "laundryhamper", "sinkbasin",
                     "bathtubbasin", "box", "toaster", "coffeemachine"})
_APPLIANCE = {kind: cls.lower() for kind, cls in APPLIANCE.items()}  # sinkbasin, microwave, fridge
_TREAT_WORD = {"clean": "clean", "hot": "heat", "heat": "heat", "cool": "cool"}

_LOOK = re.compile(r"^(?:look at|examine the) (\S+) (?:under|with) the (\S+)$")
_TWO = re.compile(r"^(?:put two|find two) (\S+) (?:in|and put them in) (\S+)$")
_TREATED = re.compile(r"^put a (clean|hot|cool) (\S+) in (\S+)$")
_TREAT_THEN = re.compile(r"^(clean|heat|cool) some (\S+) and put it in (\S+)$")
_PICK = re.compile(r"^put (?:a|some) (\S+) (?:in|on) (\S+)$")
_SEE = re.compile(r"you see ([^.]*)\.")
_TOOK = re.compile(r"You pick up the (.+?) from the (.+?)\.")
_PUT = re.compile(r"You (?:put|move) the (.+?) (?:in/on|to) the (.+?)\.")
_USE = re.compile(r"^(?:use|toggle) (.+)$")


@dataclass(frozen=True)
class TaskGoal:
    """What an ALFWorld task asks, read from its text.

    Attributes
    ----------
    task_type : str
        ``pick``, ``look``, ``clean``, ``heat``, ``cool`` or ``pick2``.
    obj : str
        The object class the task needs (``"mug"``).
    target : str
        The receptacle class it goes to (``"coffeemachine"``); "" for look tasks.
    lamp : str
        The lamp class of a look task (``"desklamp"``); "" otherwise.
    """

    task_type: str
    obj: str
    target: str = ""
    lamp: str = ""


def parse_task(task: str) -> TaskGoal | None:
    """The goal of an ALFWorld task text (the templates of alfworld's goal library); None when it fits none."""
    text = task.strip().rstrip(".").lower()
    if m := _LOOK.match(text):
        return TaskGoal("look", m.group(1), lamp=m.group(2))
    if m := _TWO.match(text):
        return TaskGoal("pick2", m.group(1), m.group(2))
    if m := _TREATED.match(text) or _TREAT_THEN.match(text):
        return TaskGoal(_TREAT_WORD[m.group(1)], m.group(2), m.group(3))
    if m := _PICK.match(text):
        return TaskGoal("pick", m.group(1), m.group(2))
    return None


@lru_cache(maxsize=None)
def _holders() -> dict[str, frozenset[str]]:
    """Object class -> receptacle classes that can hold it (ALFRED's ``VAL_RECEPTACLE_OBJECTS``, lower case)."""
    from alfworld.gen.constants import VAL_RECEPTACLE_OBJECTS

    out: dict[str, set[str]] = {}
    for recep, objects in VAL_RECEPTACLE_OBJECTS.items():
        for obj in objects:
            out.setdefault(obj.lower(), set()).add(recep.lower())
    return {obj: frozenset(receps) for obj, receps in out.items()}


def receptacle_class(name: str) -> str:
    """A receptacle's class as the tables name it: :func:`~training.envs.alfworld.expert.item_class`, with the
    doubled ``basin`` made one (``"sinkbasinbasin 1"`` -> ``"sinkbasin"``), which games generated before
    :func:`training.envs.alfworld.gen.synthetic_id` print for the sink basins of three bathroom plans."""
    return re.sub(r"(?:basin)+$", "basin", item_class(name))


def _number(name: str) -> tuple[str, int]:
    head, _, tail = name.rpartition(" ")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def search_order(obj: str, receptacles: Sequence[str], rng: np.random.Generator, *,
                 last: Sequence[str] = ()) -> list[str]:
    """The receptacles in the order the expert looks in them for an ``obj``.

    Classes of :data:`PRIORS` ``[obj]`` that can hold ``obj`` come first, in the table's order; then the other
    classes that can hold it (every class, when ``obj`` is not in ALFRED's compatibility table) in a random order;
    classes of ``last`` (the task's destination) go to the end. The instances of a class are in a random order.
    Only ``obj``, the receptacle names and ``rng`` decide the order (never where anything is).

    Parameters
    ----------
    obj : str
        Object class (``"mug"``).
    receptacles : sequence of str
        The room's receptacles (``"cabinet 3"``, ...), in any order.
    rng : numpy.random.Generator
        Breaks the ties; it draws once for the classes outside the table and once per class.
    last : sequence of str
        Receptacle classes visited after all others.

    Returns
    -------
    list of str
        Every receptacle that could hold ``obj``, each once.
    """
    names = sorted(set(receptacles), key=_number)
    present = list(dict.fromkeys(receptacle_class(r) for r in names))
    able = _holders().get(obj)
    prior = [c for c in PRIORS.get(obj, ()) if c in present and (able is None or c in able)]
    rest = sorted(c for c in present if c not in prior and (able is None or c in able))
    rest = [rest[i] for i in rng.permutation(len(rest))]
    classes = [c for c in prior + rest if c not in last] + [c for c in prior + rest if c in last]
    order: list[str] = []
    for cls in classes:
        members = [r for r in names if receptacle_class(r) == cls]
        order += [members[i] for i in rng.permutation(len(members))]
    return order


def _a(noun: str) -> str:
    return f"{'an' if noun[:1] in 'aeiou' else 'a'} {noun}"


def _items(text: str) -> list[str] | None:
    """The objects a ``... you see a mug 1, and a fork 2.`` sentence lists ([] for ``nothing``); None without one."""
    m = _SEE.search(text)
    if m is None:
        return None
    body = m.group(1).strip()
    if body == "nothing":
        return []
    parts = re.split(r",\s*(?:and\s+)?|\s+and\s+", body)
    return [re.sub(r"^(?:a|an|the)\s+", "", p.strip()) for p in parts if p.strip()]


class SearchExpert:
    """An expert that searches for what an ALFWorld task needs, from what the game shows it.

    Call :meth:`act` with every observation of the episode and the admissible commands shown with it, the first
    observation (the room and the task) included; it answers the next ``(action, reason)``, or None when it has
    nothing left to do (it found no object, or an action did not do what it expected). The admissible commands tell
    it the receptacles of the room (``go to ...``), which of them stand where it is (``examine ...``) and which of
    those are closed (``open ...``), as they tell an agent.

    Parameters
    ----------
    task : str
        The task text.
    rng : numpy.random.Generator
        Breaks the ties of :func:`search_order` (drawn at the first observation only).

    Attributes
    ----------
    looked : list of str
        The receptacles whose inside the expert has seen, in order.
    misses : int
        Receptacles a search looked in that did not hold what it was looking for.
    """

    def __init__(self, task: str, rng: np.random.Generator) -> None:
        self.task = task
        self.goal = parse_task(task)
        self._rng = rng
        self.receptacles: list[str] = []
        self.orders: dict[str, list[str]] = {}
        self.looked: list[str] = []
        self.misses = 0
        self.here: str | None = None
        self.nearby: set[str] = set()
        self.holding: str | None = None
        self.closed: set[str] = set()
        self.placed: set[str] = set()
        self.where: dict[str, str] = {}  # object -> receptacle it was last seen in/on
        self.feedback = ""
        self.admissible: list[str] = []
        self._action = ""
        self._script: Iterator[Step] | None = None

    # -- reading the game ----------------------------------------------------------------------------------------

    def act(self, observation: str, admissible: Sequence[str] = ()) -> Step | None:
        """The next ``(action, reason)`` after ``observation`` and the admissible commands shown with it."""
        self.feedback, self.admissible = observation, list(admissible)
        if self._script is None:
            self._start(observation)
        else:
            self._observe(observation)
        self.nearby = {c[len("examine "):] for c in self.admissible if c.startswith("examine ")} & set(self.receptacles)
        step = next(self._script, None)
        self._action = step[0] if step else ""
        return step

    def _start(self, observation: str) -> None:
        listed = _items(observation.split("Your task is to")[0]) or []
        commands = [c.split(" ", 2)[-1] if c.startswith("go to ") else c.split(" ", 1)[-1]
                    for c in self.admissible if c.startswith(("go to ", "examine "))]
        self.receptacles = sorted(set(listed) | set(commands), key=_number)
        if self.goal is not None:
            self.orders[self.goal.obj] = search_order(self.goal.obj, self.receptacles, self._rng,
                                                      last=(self.goal.target,))
            if self.goal.lamp:
                self.orders[self.goal.lamp] = search_order(self.goal.lamp, self.receptacles, self._rng)
        self._script = self._play()

    def _observe(self, text: str) -> None:
        verb, _, rest = self._action.partition(" ")
        if verb == "go" and text.startswith("You arrive at"):
            self.here = rest[len("to "):]
            self._contents(self.here, text)
        elif verb in ("open", "examine") and rest in self.receptacles and text != "Nothing happens.":
            self._contents(rest, text)
        elif m := _TOOK.match(text):
            self.holding = m.group(1)
            self.where.pop(m.group(1), None)
        elif m := _PUT.match(text):
            self.holding = None
            self.placed.add(m.group(1))
            self.where[m.group(1)] = m.group(2)
        if self.goal is not None and self.goal.lamp:
            for command in self.admissible:  # a lamp standing here that no sentence lists
                if (m := _USE.match(command)) and item_class(m.group(1)) == self.goal.lamp and self.here:
                    self.where.setdefault(m.group(1), self.here)

    def _contents(self, receptacle: str, text: str) -> None:
        if f"The {receptacle} is closed" in text:
            self.closed.add(receptacle)
            return
        self.closed.discard(receptacle)
        for obj in [o for o, r in self.where.items() if r == receptacle]:
            del self.where[obj]
        for obj in _items(text) or []:
            self.where[obj] = receptacle
        if receptacle not in self.looked:
            self.looked.append(receptacle)

    def _at(self, receptacle: str) -> bool:
        """Whether the expert stands at ``receptacle`` (where it arrived, or one beside it)."""
        return receptacle == self.here or receptacle in self.nearby

    def _is_closed(self, receptacle: str) -> bool:
        if self.admissible and self._at(receptacle):
            return f"open {receptacle}" in self.admissible
        return receptacle in self.closed

    def _seen(self, cls: str) -> tuple[str, str] | None:
        """An object of ``cls`` the expert has seen and not placed: where it stands if one is, else the first."""
        found = [(o, r) for o, r in self.where.items() if item_class(o) == cls and o not in self.placed]
        return next((f for f in found if self._at(f[1])), found[0] if found else None)

    def _instance(self, cls: str) -> str | None:
        """The lowest-numbered receptacle of ``cls`` in the room."""
        return min((r for r in self.receptacles if receptacle_class(r) == cls), key=_number, default=None)

    # -- playing -------------------------------------------------------------------------------------------------

    def _play(self) -> Iterator[Step]:
        goal = self.goal
        if goal is None:
            return
        obj = goal.obj
        if goal.task_type == "look":
            found = yield from self._find(obj, f"The task needs {_a(obj)}.", "The task needs it")
            if found is None or not (yield from self._take(*found)):
                return
            lamp = yield from self._find(goal.lamp, f"I have the {obj}. I need {_a(goal.lamp)} to look at it in "
                                         f"its light.", f"I need its light to look at the {obj}")
            if lamp is not None:
                yield f"use {lamp[0]}", f"I turn on {lamp[0]} to look at the {obj} in its light."
            return
        for k in range(2 if goal.task_type == "pick2" else 1):
            lead = f"I still need another {obj}." if k else f"The task needs {_a(obj)}."
            found = yield from self._find(obj, lead, "The task needs it")
            if found is None or not (yield from self._take(*found)):
                return
            name = found[0]
            if goal.task_type in _APPLIANCE:
                kind = goal.task_type
                appliance = self._instance(_APPLIANCE[kind])
                if appliance is None or not (yield from self._go(
                        appliance, f"I have the {obj}. It must be {PAST[kind]} first, so I go to {appliance}.")):
                    return
                yield f"{kind} {name} with {appliance}", f"I {kind} the {obj} with {appliance}, as the task asks."
                if not self.feedback.startswith(f"You {kind} the {name}"):
                    return
            target = self._instance(goal.target)
            if target is None or not (yield from self._go(target, f"I have the {obj}. I go to {target} to put it "
                                                                  f"there.")):
                return
            if self._is_closed(target):
                yield f"open {target}", f"{target} is closed. I open it to put the {obj} inside."
                if self._is_closed(target):
                    return
            move = f"move {name} to {target}"
            put = move if move in self.admissible else f"put {name} in/on {target}"
            first = goal.task_type == "pick2" and k == 0
            yield put, (f"I put {name} in/on {target}. That is the first one; I still need another {obj}." if first
                        else f"I put {name} in/on {target}, which completes the task.")
            if self.holding is not None:
                return

    def _go(self, receptacle: str, reason: str) -> Iterator[Step]:
        """Go to ``receptacle`` unless the expert stands at it; returns whether it does then."""
        if not self._at(receptacle):
            yield f"go to {receptacle}", reason
        return self._at(receptacle)

    def _take(self, name: str, receptacle: str) -> Iterator[Step]:
        yield f"take {name} from {receptacle}", f"I see {name} at {receptacle}. The task needs it, so I take it."
        return self.holding == name

    def _find(self, cls: str, lead: str, purpose: str) -> Iterator[Step]:
        """Search until an object of ``cls`` is in view; returns ``(object, receptacle)``, or None."""
        missed = False
        while True:
            seen = self._seen(cls)
            if seen is not None:
                name, receptacle = seen
                if not self._at(receptacle):
                    if not (yield from self._go(receptacle, f"I saw {name} at {receptacle} earlier. {purpose}, so I "
                                                            f"go there.")):
                        return None
                    if self.where.get(name) != receptacle:
                        return None
                return name, receptacle
            nxt = next((r for r in self.orders.get(cls, ()) if r not in self.looked), None)
            if nxt is None:
                return None
            start = f"There is no {cls} here." if missed else lead
            if not self._at(nxt):
                if not (yield from self._go(nxt, self._search_reason(cls, nxt, start, "go"))):
                    return None
                if self._is_closed(nxt):
                    yield f"open {nxt}", f"{nxt} is closed. I open it to look inside."
            elif self._is_closed(nxt):
                yield f"open {nxt}", self._search_reason(cls, nxt, start, "open")
            else:
                yield f"examine {nxt}", self._search_reason(cls, nxt, start, "examine")
            if nxt not in self.looked:  # it showed nothing of its inside: do not come back
                self.looked.append(nxt)
            seen = self._seen(cls)
            if seen is None or not self._at(seen[1]):
                self.misses += 1
                missed = True

    def _search_reason(self, cls: str, receptacle: str, start: str, how: str) -> str:
        kind = receptacle_class(receptacle)
        prep = "in" if kind in _INSIDE else "at"
        then = {"go": f"I have not looked {prep} {receptacle} yet, so I go there.",
                "open": f"{receptacle} is right here and closed, so I open it to look inside.",
                "examine": f"{receptacle} is right here and I have not looked {prep} it yet, so I examine it."}[how]
        if kind in PRIORS.get(cls, ()):
            return f"{start} {_a(cls).capitalize()} is often {'in' if kind in _INSIDE else 'on'} {_a(kind)}; {then}"
        return f"{start} {then}"


def search_expert(spec: GameSpec, seed: int = 0) -> SearchExpert:
    """The searching expert of one game: its ties broken by ``default_rng([seed, crc32(spec.name)])``.

    The generator depends on the game's name (``<task folder>/<trial>``) and ``seed`` only, so the same game
    played again, or a copy of it with its objects elsewhere, gets the same order.
    """
    return SearchExpert(spec.task, np.random.default_rng([int(seed), zlib.crc32(spec.name.encode())]))


@dataclass
class SearchPlay:
    """One game played by the searching expert (:func:`search_play`).

    Attributes
    ----------
    steps : list of (str, str)
        ``(action, reason)`` of every step played.
    won : bool
    looked : list of str
        Receptacles the expert looked into, in order.
    misses : int
        Receptacles a search went to that did not hold what it was looking for (> 0: the play searched).
    """

    steps: list[Step] = field(default_factory=list)
    won: bool = False
    looked: list[str] = field(default_factory=list)
    misses: int = 0


def search_play(spec: GameSpec, *, seed: int = 0, max_steps: int = ALFWORLD.max_steps) -> SearchPlay:
    """Play ``spec`` on the real engine with :func:`search_expert` until it wins, gives up or reaches ``max_steps``."""
    from training.envs.alfworld.game import AlfworldGame

    expert = search_expert(spec, seed)
    game = AlfworldGame(spec, max_steps=max_steps)
    play = SearchPlay()
    try:
        first = game.reset()
        text, admissible = first.text, first.admissible
        while not game.done:
            step = expert.act(text, admissible)
            if step is None:
                break
            play.steps.append(step)
            result = game.step(step[0])
            text, admissible, play.won = result.obs, result.admissible, result.won
    finally:
        game.close()
    play.looked, play.misses = list(expert.looked), expert.misses
    return play


def search_summary(specs: Sequence[GameSpec], *, seed: int = 0, max_steps: int = ALFWORLD.max_steps) -> dict:
    """How the searching expert does on ``specs``: games, share won, mean and most steps of the won games, share of
    the won games that searched (looked somewhere without what it was looking for), overall and per task type."""

    def summary(plays: list[SearchPlay]) -> dict:
        won = [p for p in plays if p.won]
        return {"games": len(plays), "won": len(won), "won_rate": len(won) / len(plays) if plays else float("nan"),
                "mean_steps": float(np.mean([len(p.steps) for p in won])) if won else float("nan"),
                "longest": max((len(p.steps) for p in won), default=0),
                "searched_rate": sum(p.misses > 0 for p in won) / len(won) if won else float("nan")}

    plays = [(spec.task_type, search_play(spec, seed=seed, max_steps=max_steps)) for spec in specs]
    kinds = list(dict.fromkeys(kind for kind, _ in plays))
    return {**summary([p for _, p in plays]),
            "per_type": {kind: summary([p for k, p in plays if k == kind]) for kind in kinds}}
