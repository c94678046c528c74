"""The cluster's metadata image (topics, ids, partition counts, configs) and topic administration.

Must not import net/ or api/ (the api layer calls into cluster/, never the reverse).
"""
