"""The incident runbook: a SQLite store of symptom → evidence → cause → fix, searchable, and "seen before".

``store`` holds the SQLite file, ``entry`` makes an entry from a diagnosis, ``fingerprint`` reduces an
incident's errors to a digest, ``match`` finds what was seen before, ``markdown`` writes and reads the
runbook as a document, ``seeds`` holds the classic faults a new runbook starts with.
"""
