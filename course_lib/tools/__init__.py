"""Tools for the people who maintain and teach the course, kept apart from the library a
reader imports:

    python -m course_lib.tools book sync                     # setup cells from _config.yml
    python -m course_lib.tools book execute [NOTEBOOK ...]   # re-execute, store outputs
    python -m course_lib.tools numerics probe                # what the pinned environment pins
    python -m course_lib.tools pretrained                    # remake the shipped pretrained model
    python -m course_lib.tools gpu-lane                      # make gpu-test: tests and chapters
                                                             # on a CUDA GPU
    python -m course_lib.tools assignments build --out student/  # student notebooks
    python -m course_lib.tools assignments build --format otter --out masters/  # or nbgrader

(also installed as the ``course-lib-tools`` command). ``chapters`` holds the one list of
chapters (from ``_toc.yml``) and the one notebook executor that both use; ``numerics`` the
reference numeric environment in which chapter outputs are stored and validated. They need
``pip install "course_lib[instructor]"``; grading is Otter-Grader's or nbgrader's job (see the
instructor guide).
"""
