"""Two different lock names never share a key (issue 6, item 4): no server, no API. The fuzz
tests of both APIs against a real server are tests/engine/_async/test_fuzz.py and its generated sync
twin; what they share with this one is in tests/fuzzing.py."""

from __future__ import annotations

import re

from hypothesis import assume, given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from fencelock._keys import LockKeys, escape
from tests.fuzzing import SYNC_FUZZ, names


@settings(SYNC_FUZZ, max_examples=500)
@given(data=st.data(), prefix=st.text(max_size=8).filter(lambda p: "{" not in p and "}" not in p))
def test_two_names_never_share_a_key(data: st.DataObject, prefix: str) -> None:
    a = data.draw(names, label="a")
    mutations = [
        escape(a),
        a.replace("%25", "%"),
        a.replace("{", "%7B").replace("}", "%7D"),
        a.replace("%7B", "{").replace("%7D", "}"),
        "{" + a,
        a + "}",
        a + "}:lock",
        a + "}:fence",
        a[:-1],
    ]
    b = data.draw(st.one_of(names, st.sampled_from(mutations)), label="b")
    assume(a != b)
    ka, kb = LockKeys.for_name(a, prefix), LockKeys.for_name(b, prefix)
    family_a, family_b = {ka.lock, ka.fence, ka.channel}, {kb.lock, kb.fence, kb.channel}
    assert len(family_a) == 3
    assert not family_a & family_b
    # the whole escaped name is the hash tag: one Cluster slot for the family, braces or not
    # (the empty name, refused by lock(), would make an empty tag, which Redis ignores)
    for key in family_a:
        start = key.index("{")
        assert key[start + 1 : key.index("}", start)] == escape(a)
    assert len({key_slot(k.encode()) for k in family_a}) == 1 or not a
    # and the escaping can be undone, so it is injective
    unescaped = re.sub("%(25|7B|7D)", lambda m: {"25": "%", "7B": "{", "7D": "}"}[m[1]], escape(a))
    assert unescaped == a
