"""SSL principal mapping (KIP-371 rules, RFC 2253 DNs from Python's peer certificate) and JAAS parsing."""

from __future__ import annotations

import pytest

from kbroker.security.jaas import JaasConfigError, parse_jaas_config
from kbroker.security.principal import PrincipalMappingError, SslPrincipalMapper, dn_from_peercert

PEERCERT = {"subject": ((("countryName", "US"),), (("stateOrProvinceName", "CA"),),
                        (("organizationName", "Acme, Inc"),), (("organizationalUnitName", "Eng"),),
                        (("commonName", "alice"),))}


def test_dn_is_rfc2253_most_specific_first_with_escapes() -> None:
    assert dn_from_peercert(PEERCERT) == "CN=alice,OU=Eng,O=Acme\\, Inc,ST=CA,C=US"
    assert dn_from_peercert({}) is None and dn_from_peercert(None) is None


def test_default_rule_keeps_the_dn() -> None:
    assert str(SslPrincipalMapper().principal(PEERCERT)) == "User:CN=alice,OU=Eng,O=Acme\\, Inc,ST=CA,C=US"
    assert str(SslPrincipalMapper().principal({})) == "User:ANONYMOUS"


def test_kafka_rule_examples() -> None:
    # The examples of Kafka's documentation and SslPrincipalMapperTest.
    rules = ("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
             "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
             "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/U,DEFAULT")
    m = SslPrincipalMapper(rules)
    assert m.name("CN=kafka-server1,OU=ServiceUsers,O=Org,C=US") == "kafka-server1"
    assert m.name("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=PA,ST=CA,C=US") == "duke@javasoft"
    assert m.name("cn=duke3") == "DUKE3"
    assert m.name("OU=x") == "OU=x"


def test_no_matching_rule_is_an_error() -> None:
    with pytest.raises(PrincipalMappingError, match="No rules apply to OU=x"):
        SslPrincipalMapper("RULE:^CN=(.*)$/$1/").name("OU=x")


def test_invalid_rules_are_refused() -> None:
    with pytest.raises(ValueError):
        SslPrincipalMapper("RULE:nope")


def test_plain_login_module_users() -> None:
    e = parse_jaas_config('org.apache.kafka.common.security.plain.PlainLoginModule required '
                          'username="admin" password="admin-secret" user_admin="admin-secret" '
                          'user_alice="a\\"b";')
    assert e.control_flag == "required"
    assert e.plain_users() == {"admin": "admin-secret", "alice": 'a"b'}


@pytest.mark.parametrize("text", ["", "Module required a=\"b\"", "Module bogus;", "Module required a;",
                                  "M required a=\"b\"; N required;"])
def test_bad_jaas_is_refused(text: str) -> None:
    with pytest.raises(JaasConfigError):
        parse_jaas_config(text)
