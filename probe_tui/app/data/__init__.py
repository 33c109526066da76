"""What the views read, off the UI thread: columnar result data, dump indexes, the live metrics feed.

Nothing here imports Textual; screens call these from thread workers and get plain objects back.
"""
