"""What the ACL APIs share: kbroker has no authorizer (`authorizer.class.name` is empty, Kafka's default).

Kafka 4.3.1 without an authorizer answers DescribeAcls with SECURITY_DISABLED "No Authorizer is
configured on the broker" and each CreateAcls creation / DeleteAcls filter with SECURITY_DISABLED
"No Authorizer is configured." (checked against the reference broker). Admin clients show that as
"security is disabled" at once (Java: SecurityDisabledException, kafka-python: SecurityDisabledError),
which is what their own test suites expect from a broker without ACLs. A request whose filter or
binding has UNKNOWN elements (or, for a creation, ANY/MATCH) cannot be parsed by Kafka's request
classes (`validate` throws), and Kafka closes the connection: so does kbroker. Replaced when ACLs
are implemented (issue on ACLs and SCRAM).
"""

from __future__ import annotations

from kbroker.protocol.errors import ErrorCode

NO_AUTHORIZER_DESCRIBE = "No Authorizer is configured on the broker"
NO_AUTHORIZER = "No Authorizer is configured."
SECURITY_DISABLED = ErrorCode.SECURITY_DISABLED

UNKNOWN = 0
ANY = 1
MATCH = 2  # PatternType.MATCH: only in filters
