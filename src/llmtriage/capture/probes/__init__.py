"""Scripts that capture runs in the server's own Python, by path (this folder holds nothing else, so it shadows no
module of that environment). They must run on any Python 3 the server may have and print one JSON document."""
