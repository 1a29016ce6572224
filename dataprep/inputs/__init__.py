"""RAW as dataprep finds it: walked, its layout detected, listed, grouped into raw records (see README.md)."""
