"""What the measurements mean: percentiles and scaling arithmetic (stats), the formulas behind the
explanations (formulas), compute against communication (communication) and the scaling tables shared by the
live view and the saved summary (scaling).

Plain Python on plain numbers and a session's figures: no Textual, no torch. Import the modules themselves;
this package imports none of them, so ``ddptop.run.session`` can use ``stats`` without pulling in the rest.
"""
