"""The words, subjects and people that captions, metadata, table rows and text draw from (non-ASCII on purpose)."""

from __future__ import annotations

SUBJECTS = ("tench", "goldfinch", "tree frog", "tabby cat", "fire truck", "espresso",
            "volcano", "daisy", "garden spider", "lighthouse", "sailboat", "bagel")
WORDS = ("quiet", "naïve", "bright", "façade", "Zürich", "morning", "東京", "river",
         "old", "crème", "blue", "harbour", "déjà vu", "snow", "über", "light")
PEOPLE = ("Zoë Ångström", "李雷", "José Núñez", "Ada Lovelace", "Ólafur Þórsson")
