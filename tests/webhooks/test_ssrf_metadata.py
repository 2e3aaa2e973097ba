"""Every cloud's metadata and host-agent address is refused, in every encoding, whatever
the operator allows: metadata is never a legitimate webhook target.

Table-driven: each row is an address (or a name) a cloud answers credentials or host
configuration on, and each is tried bare, with every network allow-listed, and as an
allow-listed host. No test makes an external connection: names resolve through fake
resolvers.
"""

from __future__ import annotations

import pytest

from django_pgqueue.webhooks.ssrf import UnsafeURLError, is_address_allowed, validate_url

EVERYTHING = ["0.0.0.0/0", "::/0"]
PUBLIC_V4 = "93.184.215.14"

# (address, who answers on it)
METADATA_ADDRESSES = [
    ("169.254.169.254", "AWS, GCP, Azure, DigitalOcean, Hetzner, Oracle, OpenStack IMDS"),
    ("169.254.170.2", "AWS ECS task metadata"),
    ("169.254.169.253", "AWS VPC DNS"),
    ("169.254.169.123", "AWS time sync"),
    ("169.254.0.23", "Tencent Cloud metadata"),
    ("169.254.20.10", "Kubernetes node-local DNS"),
    ("168.63.129.16", "Azure WireServer (host agent)"),
    ("100.100.100.200", "Alibaba Cloud metadata"),
    ("192.0.0.192", "Oracle Cloud metadata (legacy)"),
    ("fd00:ec2::254", "AWS IMDS over IPv6"),
    ("fd00:ec2::253", "AWS DNS over IPv6"),
    ("fd00:ec2::123", "AWS time sync over IPv6"),
    ("fd20:ce::254", "GCP metadata over IPv6"),
    ("fe80::a9fe:a9fe", "IPv6 link-local"),
    # The same targets carried inside IPv6.
    ("::ffff:168.63.129.16", "IPv4-mapped Azure WireServer"),
    ("::ffff:192.0.0.192", "IPv4-mapped Oracle metadata"),
    ("::ffff:0:a83f:8110", "IPv4-translated (SIIT) Azure WireServer"),
    ("::a83f:8110", "IPv4-compatible Azure WireServer"),
    ("64:ff9b::a83f:8110", "NAT64 Azure WireServer"),
    ("64:ff9b::c000:c0", "NAT64 Oracle metadata"),
    ("64:ff9b::a9fe:a9fe", "NAT64 IMDS"),
    ("64:ff9b:1::a83f:8110", "local NAT64 Azure WireServer"),
    ("2002:a83f:8110::1", "6to4 Azure WireServer"),
    ("2002:c000:c0::1", "6to4 Oracle metadata"),
    ("2001:0:4136:e378:8000:63bf:57c0:7eef", "Teredo client Azure WireServer"),
    ("2600::5efe:a83f:8110", "ISATAP Azure WireServer"),
]

# Written independently of ssrf.HARD_DENY_HOSTS (the spec, not a copy of the code),
# with the spellings a customer might use.
METADATA_NAMES = [
    "Metadata.Google.Internal.",  # GCP, any case, fully qualified
    "metadata.goog",  # GCP
    "instance-data.ec2.internal",  # AWS
    "instance-data",  # AWS, short name
    "metadata",  # the short name search domains complete
    "metadata.tencentyun.com",  # Tencent
    "metadata.google.internal",
]


@pytest.mark.parametrize(
    ("address", "who"), METADATA_ADDRESSES, ids=[a for a, _ in METADATA_ADDRESSES]
)
@pytest.mark.parametrize("allow", [[], EVERYTHING], ids=["default", "everything-allowed"])
def test_metadata_addresses_are_never_allowed(address, who, allow):
    allowed, reason = is_address_allowed(address, allow)
    assert not allowed, who
    assert "never allowed" in reason, (who, reason)


@pytest.mark.parametrize(
    ("address", "who"), METADATA_ADDRESSES[:14], ids=[a for a, _ in METADATA_ADDRESSES[:14]]
)
def test_a_host_allow_listed_by_the_operator_still_cannot_resolve_to_metadata(address, who):
    with pytest.raises(UnsafeURLError) as caught:
        validate_url(
            "https://hooks.internal.test/in",
            allow_http=False,
            allow_networks=EVERYTHING,
            allow_hosts=["hooks.internal.test"],
            resolver=lambda host, port: [address],
        )
    assert "never allowed" in caught.value.operator_detail, who


@pytest.mark.parametrize("name", METADATA_NAMES)
def test_metadata_host_names_are_refused_whatever_they_resolve_to(name):
    # A resolver that answers a public address (a split-horizon DNS, a poisoned cache):
    # the name alone is enough to refuse, even when allow-listed.
    with pytest.raises(UnsafeURLError) as caught:
        validate_url(
            f"http://{name}/computeMetadata/v1/",
            allow_http=True,
            allow_networks=EVERYTHING,
            allow_hosts=[name],
            resolver=lambda host, port: [PUBLIC_V4],
        )
    assert "cloud metadata host name" in caught.value.operator_detail
    assert "never allowed" in caught.value.operator_detail


def test_an_ordinary_public_azure_address_is_still_allowed():
    # Only the host agent's single address is denied, not Azure's public ranges.
    assert is_address_allowed("168.63.129.17") == (True, "")
    assert is_address_allowed("20.42.0.1") == (True, "")
