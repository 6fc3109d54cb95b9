"""Hostile profile texts: classic attacks on YAML loaders, each of which must end in one clear ProfileError."""

from __future__ import annotations

from sdcscan.profile import MAX_PROFILE_BYTES

HOSTILE_PROFILES = {
    "anchor bomb": "a: &a [x, x]\nb: &b [*a, *a]\nc: &c [*b, *b]\nd: [*c, *c]\n",
    "deep nesting": "version: 1\nworkloads: " + "[" * 5000 + "]" * 5000 + "\n",
    "deep mapping": "version: 1\nx: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n",
    "huge budget": "version: 1\nbudget: 1e400\nworkloads: [{name: train}]\n",
    "huge seed": "version: 1\nseed: " + "9" * 5000 + "\nworkloads: [{name: train}]\n",
    "huge param": "version: 1\nworkloads: [{name: train, params: {steps: 99999999999999999999}}]\n",
    "nan param": "version: 1\nworkloads: [{name: train, params: {lr: .nan}}]\n",
    "python tag": "version: 1\nworkloads: !!python/object/apply:os.system ['true']\n",
    "binary": "version: 1\nname: !!binary aGVsbG8=\nworkloads: [{name: train}]\n",
    "duplicate key": "version: 1\nversion: 1\nworkloads: [{name: train}]\n",
    "unknown key": "version: 1\nworkload: [{name: train}]\n",
    "wrong type": "version: 1\nthreads_per_unit: many\nworkloads: [{name: train}]\n",
    "not a mapping": "- 1\n- 2\n",
    "empty": "",
    "too big": "version: 1\n" + "#" * (MAX_PROFILE_BYTES + 1),
}
