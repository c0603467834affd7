"""Version refs (number, vN, label, hash prefix): a prefix that is too short or ambiguous says so, and how many
characters would be enough, in the store, the API and the console."""

import json

import pytest
from django.urls import reverse

from harness import selectors
from harness.models import HarnessVersion
from serving.services import api_key_create
from workspaces.access import Actor

pytestmark = pytest.mark.django_db
SYSTEM = Actor.system("test")
SHARED = "abcdef0123ab"  # 12 characters both hashes share


@pytest.fixture
def twins(harness):
    """v2 and v3, whose content hashes share their first 12 characters. Stored hashes cannot be changed (a
    trigger refuses it) and real ones never collide that far, so these rows are inserted with forged hashes."""
    for number, digit in ((2, "2"), (3, "3")):
        HarnessVersion.objects.create(harness=harness, number=number, content_hash=SHARED + digit * 52,
                                      files=harness.head.files, parent=harness.head, author_kind="system",
                                      author_label="test", message=f"twin {number}")
    return harness


def message_of(harness, ref: str) -> str:
    with pytest.raises(selectors.VersionRefNotFound) as caught:
        selectors.version_resolve(harness, ref)
    return str(caught.value)


def test_hash_prefixes_resolve_only_when_unique_and_long_enough(twins):
    assert selectors.version_resolve(twins, SHARED + "2").number == 2
    assert selectors.version_resolve(twins, (SHARED + "3").upper()).number == 3
    ambiguous = message_of(twins, SHARED[:8])
    assert "ambiguous" in ambiguous and "(v2, v3)" in ambiguous and "at least 13 characters" in ambiguous
    short = message_of(twins, "abcd")
    assert "too short" in short and "at least 13 characters" in short  # two matches: 13 tells them apart
    v1 = twins.versions.get(number=1).content_hash
    assert selectors.version_resolve(twins, v1[:8]).number == 1
    single = message_of(twins, v1[:5])
    if v1[:5].isdigit():  # digits alone are read as a version number first
        assert f"has no version {int(v1[:5])} (as a content-hash prefix it is too short" in single
    else:
        assert "too short (5 characters; it matches v1)" in single
    assert "at least 8 characters" in single
    assert "has no version, label or content hash starting “0000000099”" in message_of(twins, "0000000099")
    assert "has no version 9" in message_of(twins, "v9")
    assert "has no version, label or content hash “no-such-label”" in message_of(twins, "no-such-label")
    assert "Give a version" in message_of(twins, "  ")


def test_hash_prefix_needed():
    assert selectors.hash_prefix_needed(["a" * 64]) == 8
    assert selectors.hash_prefix_needed(["abcdefghij1", "abcdefghij2", "zzzz"]) == 11


def test_the_api_and_the_diff_page_say_how_many_characters_are_needed(client, twins, members):
    token = api_key_create(actor=SYSTEM, workspace=twins.workspace, name="platform", scopes=["read"])[1]
    response = client.get(f"/api/v1/harnesses/avatar/versions/{SHARED[:8]}", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 404
    assert "at least 13 characters" in json.loads(response.content)["detail"]

    client.force_login(members["viewer"])
    url = reverse("version_diff", kwargs={"ws": twins.workspace.slug, "name": twins.name})
    page = client.get(url, {"a": SHARED[:9], "b": "3"})
    assert page.status_code == 422
    assert "From: The hash prefix “abcdef012” is ambiguous" in page.content.decode()
    assert "at least 13 characters" in page.content.decode()
    assert client.get(url, {"a": SHARED + "2", "b": "3"}).status_code == 200
